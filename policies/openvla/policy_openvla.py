"""OpenVLA as an ``embodied`` policy: camera + instruction -> one action per step, steerable.

The policy exposes knob ``"alpha"`` (steering strength) when a steering direction or neuron
cluster is attached; the closed loop (:func:`embodied.loop.rollout` with a ``Steering``) sets
it between control steps and the hook reads it on every generated token.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied.contracts import Env, Knob, KnobMixin, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import Observation
from policies.openvla.loading_openvla import load_pretrained
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor, action_stats, unnormalize
from policies.openvla.steering import (
    NeuronCluster,
    SteeringDirection,
    SteeringHook,
    load_intervention,
)


class OpenVLAPolicy(KnobMixin, Policy):
    """Greedy OpenVLA action prediction with an optional steering knob.

    Args:
        model: The native model (eval mode).
        processor: Its processor (tokenizer, image preprocessing, action tokenizer).
        unnorm_key: Dataset statistics to un-normalise with (None if only one).
        image_key: Observation key of the camera (``image.<camera>``); None picks the env's
            first camera at :meth:`check_compatible`.
        intervention: A steering direction / neuron cluster (or a path to one) for knob ``alpha``.
        alpha_limit: Knob bounds ``[-alpha_limit, alpha_limit]``.
        flip_image: Rotate frames by 180 degrees (LIBERO renders upside down).
    """

    def __init__(
        self,
        model: OpenVLAModel,
        processor: OpenVLAProcessor,
        unnorm_key: str | None = None,
        image_key: str | None = None,
        intervention: SteeringDirection | NeuronCluster | str | os.PathLike[str] | None = None,
        alpha_limit: float = 4.0,
        flip_image: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.processor = processor
        self.unnorm_key = model.config.resolve_unnorm_key(unnorm_key)
        self.stats = action_stats(model.config, self.unnorm_key)
        self.action_dim = model.config.action_dim(self.unnorm_key)
        self.image_key = image_key
        self.image_keys = (image_key,) if image_key else ()
        self.flip_image = flip_image
        self.hook: SteeringHook | None = None
        self._knobs = {}
        if intervention is not None:
            if not isinstance(intervention, (SteeringDirection, NeuronCluster)):
                intervention = load_intervention(intervention)
            self.hook = SteeringHook(model, intervention).attach()
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

    def _image(self, obs: Observation) -> np.ndarray:
        key = self.image_key or next((k for k in obs if k.startswith("image.")), None)
        if key is None or key not in obs:
            raise ConfigError(
                f"observation lacks camera {key!r}; keys: {sorted(obs)}",
                fix="pass image_key=image.<camera> matching the env",
            )
        img = np.asarray(obs[key])
        return np.ascontiguousarray(img[::-1, ::-1]) if self.flip_image else img

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
        """Batched actions in env units (B, action_dim)."""
        toks = self.predict_tokens(images, instructions)
        return unnormalize(self.processor.actions.decode(toks), self.stats)

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One action (1, action_dim) from the camera frame and ``obs["instruction"]``."""
        instruction = obs.get("instruction", "")
        if not instruction:
            raise ConfigError(
                "observation has no instruction", fix="the env must set obs['instruction']"
            )
        return self.predict_batch([self._image(obs)], [str(instruction)])


def build_policy(
    path: str | os.PathLike[str] = "openvla/openvla-7b",
    env: Env | None = None,
    unnorm_key: str | None = None,
    steering: str | os.PathLike[str] | None = None,
    device: str = "auto",
    dtype: str = "auto",
    center_crop: bool | None = None,
    alpha_limit: float = 4.0,
    flip_image: bool | None = None,
    **_: Any,
) -> OpenVLAPolicy:
    """Load an OpenVLA checkpoint (folder or hub id) as a policy.

    ``center_crop``/``flip_image`` default to True for LIBERO envs (``libero:*``).
    """
    libero = env is not None and env.env_id.startswith("libero")
    model, proc = load_pretrained(
        path, device=device, dtype=dtype, center_crop=libero if center_crop is None else center_crop
    )
    return OpenVLAPolicy(
        model,
        proc,
        unnorm_key=unnorm_key,
        intervention=steering,
        alpha_limit=alpha_limit,
        flip_image=libero if flip_image is None else flip_image,
    )
