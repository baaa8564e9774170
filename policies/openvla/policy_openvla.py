"""OpenVLA as an ``embodied`` policy: camera + instruction -> one action per step, steerable.

The policy exposes knob ``"alpha"`` (steering strength) when a steering direction or neuron
cluster is attached; the closed loop (:func:`embodied.loop.rollout` with a ``Steering``) sets
it between control steps and the hook reads it on every generated token.

Every conversion between the env and the model is the processor's
(:class:`~policies.openvla.processor_openvla.OpenVLAProcessor`): the env hands over its native
frames and takes its native actions. The processor's settings come as a preset
(:data:`PRESETS`); on an env that delivers LIBERO's native data the ``libero`` preset is OpenVLA's
LIBERO evaluation exactly (``experiments/robot/libero/run_libero_eval.py``). The policy declares
the frame orientation and gripper convention that result, so ``check_compatible`` refuses a
LIBERO fine-tuned setup on a non-LIBERO env, or a plain OpenVLA on LIBERO, before the first step,
and :meth:`OpenVLAPolicy.preflight` records what a reproduction needs next to every result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from embodied.contracts import Env, Knob, KnobMixin, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import Observation
from policies.openvla.loading_openvla import load_pretrained
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor, action_stats
from policies.openvla.steering import (
    NeuronCluster,
    SteeringDirection,
    SteeringHook,
    load_intervention,
)

PRESETS: Mapping[str, Mapping[str, Any]] = {
    "libero": {
        "image_pipeline": "libero_reference",
        "center_crop": True,
        "action_convention": "libero",
    },
    "openvla": {"image_pipeline": "resize", "action_convention": "openvla"},
    "as_trained": {"action_convention": "as_trained"},
}
"""Processor settings by preset name (a ``center_crop`` argument overrides the preset's).

* ``libero``: OpenVLA's LIBERO evaluation (``run_libero_eval.py``): LIBERO's raw frames through
  the reference image pipeline (rotate 180, JPEG round trip, lanczos3 resize, center crop 0.9
  of the area, as for checkpoints fine-tuned with random-crop augmentation), gripper binarized
  and inverted to LIBERO's -1 open / +1 close, statistics of the suite (``unnorm_key`` =
  suite, or ``<suite>_no_noops``).
* ``openvla``: released checkpoints on upright frames; actions as decoded (gripper 1 open).
* ``as_trained``: a model trained on the env's own frames and actions (``embodied train vla``);
  the checkpoint's image settings, no conventions declared.

Chosen automatically (``preset=None``): ``libero`` on an env whose cameras deliver
``vertical_flip`` frames and whose gripper is ``close_positive`` (LIBERO's native data),
``openvla`` elsewhere.
"""

REFERENCE_RENDER_SIZE = 256
"""Camera size (px) of OpenVLA's LIBERO evaluation (``get_libero_env(resolution=256)``)."""


def env_preset(env: Env | None) -> str:
    """The preset that fits ``env``'s declared conventions (see :data:`PRESETS`)."""
    if env is None:
        return "openvla"
    cams = env.observation_spec.cameras
    libero_frames = bool(cams) and all(c.orientation == "vertical_flip" for c in cams.values())
    if libero_frames and env.gripper_convention == "close_positive":
        return "libero"
    return "openvla"


def libero_unnorm_key(stats_keys: Sequence[str], suite: str) -> str:
    """OpenVLA's choice of statistics on a LIBERO suite: ``suite``, else ``<suite>_no_noops``.

    Raises:
        CompatibilityError: the checkpoint has statistics for neither (it was not fine-tuned
            on that suite), naming the released checkpoint that was.
    """
    for key in (suite, f"{suite}_no_noops"):
        if key in stats_keys:
            return key
    raise CompatibilityError(
        f"the checkpoint has no action statistics for LIBERO suite {suite!r} (it has "
        f"{sorted(stats_keys)}), so it was not fine-tuned on it",
        fix=f"use an OpenVLA checkpoint fine-tuned on {suite} (released: "
        f"openvla/openvla-7b-finetuned-{suite.replace('_', '-')}), or pass "
        "--policy-arg unnorm_key=KEY to un-normalise with another dataset's statistics",
    )


class OpenVLAPolicy(KnobMixin, Policy):
    """Greedy OpenVLA action prediction with an optional steering knob.

    Args:
        model: The native model (eval mode).
        processor: Its processor: image pipeline, tokenizer, action (de)tokenisation and the
            action convention; the policy's declared conventions are the processor's.
        unnorm_key: Dataset statistics to un-normalise with (None if only one).
        image_key: Observation key of the camera (``image.<camera>``); None picks the env's
            first camera at :meth:`check_compatible`.
        intervention: A steering direction / neuron cluster (or a path to one) for knob ``alpha``.
        alpha_limit: Knob bounds ``[-alpha_limit, alpha_limit]``.
        preset: The :data:`PRESETS` name the processor was set up with (for the preflight).
        source: The checkpoint folder or hub id (for the preflight).
        instruction_suffix: Words appended to every instruction (e.g. "at speed 5": a model
            trained on prompts that name a speed runs at that nominal speed, which steering
            then moves); empty: the env's instruction as it is.
    """

    def __init__(
        self,
        model: OpenVLAModel,
        processor: OpenVLAProcessor,
        unnorm_key: str | None = None,
        image_key: str | None = None,
        intervention: SteeringDirection | NeuronCluster | str | os.PathLike[str] | None = None,
        alpha_limit: float = 4.0,
        preset: str | None = None,
        source: str = "",
        instruction_suffix: str = "",
    ) -> None:
        super().__init__()
        self.model = model
        self.instruction_suffix = instruction_suffix.strip()
        self.processor = processor
        self.preset = preset
        self.source = source
        self.unnorm_key = model.config.resolve_unnorm_key(unnorm_key)
        self.stats = action_stats(model.config, self.unnorm_key)
        self.action_dim = model.config.action_dim(self.unnorm_key)
        self.image_key = image_key
        self.image_keys = (image_key,) if image_key else ()
        self.image_orientation = processor.image_orientation
        self.gripper_convention = processor.gripper_convention
        self.hook: SteeringHook | None = None
        self._knobs = {}
        if intervention is not None:
            file: str | os.PathLike[str] | None = None
            if not isinstance(intervention, (SteeringDirection, NeuronCluster)):
                file, intervention = intervention, load_intervention(intervention)
            try:
                self.hook = SteeringHook(model, intervention).attach()
            except ConfigError as exc:  # another model's layer or size: name the file
                raise (exc if file is None else exc.in_file(file, "steering file")) from exc
            self._knobs = {
                "alpha": Knob.scalar(
                    "alpha",
                    -alpha_limit,
                    alpha_limit,
                    0.0,
                    description=f"steering strength along {intervention.concept or 'the direction'}",
                )
            }

    # ----- knobs -----
    def set_knob(self, name: str, value: Any) -> None:
        """Set ``alpha``; the hook uses it from the next generated token on."""
        super().set_knob(name, value)
        if name == "alpha" and self.hook is not None:
            self.hook.alpha = float(self.get_knob("alpha")[0])

    def reset_knobs(self) -> None:
        """Alpha back to 0."""
        super().reset_knobs()
        if self.hook is not None:
            self.hook.alpha = 0.0

    def close(self) -> None:
        """Detach the steering hook."""
        if self.hook is not None:
            self.hook.remove()

    # ----- policy -----
    def convention_fix(self, env: Env) -> str:
        """How to match ``env``: the preset that fits it."""
        return (
            f"load the policy with the preset for this env (now {self.preset!r}; this env fits "
            f"{env_preset(env)!r}): --policy-arg preset={env_preset(env)}, or 'as_trained' for "
            "a model trained on this env's own frames and actions"
        )

    def check_compatible(self, env: Env) -> None:
        """Pick the env's first camera if none was given, then the usual checks."""
        if self.image_key is None:
            keys = env.observation_spec.image_keys
            if not keys:
                raise CompatibilityError(
                    f"OpenVLA needs a camera but env {env.env_id!r} has none",
                    fix="enable a camera on the env",
                )
            self.image_key = keys[0]
            self.image_keys = (self.image_key,)
        super().check_compatible(env)

    def preflight(self, env: Env) -> dict[str, Any]:
        """Check ``env`` and return what a reproduction needs (stored next to every result).

        Records the checkpoint, preset, statistics key (and that it is in the checkpoint),
        image pipeline, center crop, camera, both sides' conventions and the env's protocol
        (the evaluation records library versions beside it, once per run).

        Raises:
            CompatibilityError: :meth:`check_compatible` fails, or a known-bad combination:
                the ``libero`` preset on cameras not rendered at the reference's 256 px.
        """
        self.check_compatible(env)
        cfg = self.model.config
        key = str(self.image_key)
        cam = env.observation_spec.cameras[key.removeprefix("image.")]
        described = env.describe()
        if self.preset == "libero" and (cam.height, cam.width) != (REFERENCE_RENDER_SIZE,) * 2:
            raise CompatibilityError(
                f"the libero preset reproduces OpenVLA's evaluation on {REFERENCE_RENDER_SIZE} px "
                f"frames, but {env.env_id!r} renders {key} at {cam.height}x{cam.width}",
                fix=f"render at {REFERENCE_RENDER_SIZE} px (the LIBERO protocol's render_size)",
            )
        suite = described.get("suite")
        return {
            "policy": "openvla",
            "checkpoint": self.source,
            "model": cfg.name,
            "preset": self.preset,
            "unnorm_key": self.unnorm_key,
            "unnorm_key_in_checkpoint": self.unnorm_key in cfg.norm_stats,
            "unnorm_key_matches_suite": None
            if suite is None
            else self.unnorm_key in (suite, f"{suite}_no_noops"),
            "checkpoint_stats_keys": sorted(cfg.norm_stats),
            "image_pipeline": cfg.image_pipeline,
            "center_crop": cfg.center_crop,
            "crop_area": cfg.crop_area if cfg.center_crop else None,
            "model_image_size": cfg.image_size,
            "camera": key,
            "camera_size": [cam.height, cam.width],
            "camera_orientation": cam.orientation,
            "policy_image_orientation": self.image_orientation,
            "action_convention": self.processor.action_convention,
            "policy_gripper_convention": self.gripper_convention,
            "env_gripper_convention": env.gripper_convention,
            "env_protocol": described.get("protocol"),
        }

    def _image(self, obs: Observation) -> np.ndarray:
        key = self.image_key or next((k for k in obs if k.startswith("image.")), None)
        if key is None or key not in obs:
            raise ConfigError(
                f"observation lacks camera {key!r}; keys: {sorted(obs)}",
                fix="pass image_key=image.<camera> matching the env",
            )
        return np.asarray(obs[key])

    def predict_tokens(
        self, images: Sequence[np.ndarray], instructions: Sequence[str]
    ) -> np.ndarray:
        """Batched greedy decoding -> action token ids (B, action_dim)."""
        m = self.model
        pv = self.processor.images(list(images)).to(device=m.device, dtype=m.dtype)
        ids, mask = self.processor.encode_prompts(list(instructions))
        toks = m.generate_tokens(pv, ids.to(m.device), mask.to(m.device), self.action_dim)
        return toks.cpu().numpy()

    def predict_batch(
        self, images: Sequence[np.ndarray], instructions: Sequence[str]
    ) -> np.ndarray:
        """Batched actions in env units (B, action_dim), in the policy's action convention."""
        toks = self.predict_tokens(images, instructions)
        return self.processor.postprocess_actions(self.processor.actions.decode(toks), self.stats)

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One action (1, action_dim) from the camera frame and ``obs["instruction"]``."""
        instruction = obs.get("instruction", "")
        if not instruction:
            raise ConfigError(
                "observation has no instruction", fix="the env must set obs['instruction']"
            )
        if self.instruction_suffix:
            instruction = f"{instruction} {self.instruction_suffix}"
        return self.predict_batch([self._image(obs)], [str(instruction)])


def load_for_preset(
    path: str | os.PathLike[str],
    preset: str,
    center_crop: bool | None = None,
    device: str = "auto",
    dtype: str = "auto",
) -> tuple[OpenVLAModel, OpenVLAProcessor]:
    """Load a checkpoint with its processor set up as :data:`PRESETS` ``preset`` says
    (``center_crop`` overrides the preset's)."""
    settings = PRESETS[preset]
    crop = settings.get("center_crop") if center_crop is None else bool(center_crop)
    return load_pretrained(
        path,
        device=device,
        dtype=dtype,
        center_crop=crop,
        image_pipeline=settings.get("image_pipeline"),
        action_convention=settings["action_convention"],
    )


def build_policy(
    path: str | os.PathLike[str] = "openvla/openvla-7b",
    env: Env | None = None,
    unnorm_key: str | None = None,
    steering: str | os.PathLike[str] | None = None,
    device: str = "auto",
    dtype: str = "auto",
    center_crop: bool | None = None,
    alpha_limit: float = 4.0,
    preset: str | None = None,
    **_: Any,
) -> OpenVLAPolicy:
    """Load an OpenVLA checkpoint (folder or hub id) as a policy for ``env``.

    Args:
        path: Checkpoint folder (ours or the released layout) or hub id.
        env: The env it will run on; picks the preset when ``preset`` is None.
        unnorm_key: Statistics key (None: the only one, or, with ``libero``, the suite's).
        steering: A saved steering direction / neuron cluster for knob ``alpha``.
        device: ``auto``, ``cpu`` or ``cuda[:i]``.
        dtype: ``auto`` or a dtype name.
        center_crop: Override the preset's (or the checkpoint's) center crop.
        alpha_limit: Knob bounds.
        preset: :data:`PRESETS` name (None: :func:`env_preset`).

    Raises:
        ConfigError: unknown preset.
        CompatibilityError: ``libero`` preset and no statistics for the env's suite.
    """
    name = env_preset(env) if preset is None else preset
    if name not in PRESETS:
        raise ConfigError(
            f"unknown OpenVLA preset {name!r}; presets: {list(PRESETS)}",
            fix="pass --policy-arg preset=libero|openvla|as_trained (or leave it to the env)",
        )
    model, proc = load_for_preset(path, name, center_crop=center_crop, device=device, dtype=dtype)
    if name == "libero" and unnorm_key is None and env is not None:
        suite = env.describe().get("suite")
        if suite:
            unnorm_key = libero_unnorm_key(list(model.config.norm_stats), str(suite))
    return OpenVLAPolicy(
        model,
        proc,
        unnorm_key=unnorm_key,
        intervention=steering,
        alpha_limit=alpha_limit,
        preset=name,
        source=str(path),
    )
