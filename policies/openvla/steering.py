"""Activation steering of the OpenVLA language model.

* :class:`SteeringDirection` - a residual-stream direction at one decoder layer, from the
  difference of means between two contrast sets (e.g. fast vs slow demonstration steps).
* :class:`NeuronCluster` - the fixed-alpha baseline that overwrites selected MLP neurons
  (the inputs of ``down_proj``) with ``alpha * value``.
* :class:`ValueVectorNeurons` + :class:`ValueVectorHook` - the fixed-coefficient baseline of
  Häon et al. 2025: neurons whose FFN value vectors project onto concept tokens, their
  activations set to a constant (:func:`select_value_vector_neurons`).
* :class:`SteeringHook` - adds ``alpha * direction`` to the output of the chosen decoder
  layer at every position: the whole prefill and every cached decode step, so every
  generated token is steered. A direction may instead name its ``site`` (the layer's input:
  layer 0's input is the token and patch embeddings) and one prompt ``position`` (e.g. the
  speed word's; ours): it is then added there only, once, in the prefill. ``alpha`` is read
  at each call, so a controller can change it between control steps; ``alpha == 0`` skips
  the addition (bitwise-identical outputs).

Both artefacts save to ``<name>.safetensors`` + ``<name>.json`` (metadata).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from embodied.errors import CheckpointError, ConfigError
from embodied.io import (
    atomic_path,
    build_from_file,
    load_safetensors_file,
    read_json_file,
    write_json,
)
from policies.openvla.modeling_openvla import OpenVLAModel

_T = TypeVar("_T")

STEERING_SITES = ("output", "input")
"""Where a :class:`SteeringDirection` is added: a decoder layer's output or its input."""

_EXTRACT_FIX = "re-create it with `embodied lab steer extract` (the files are damaged or not ours)"


def _paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    p = Path(path)
    stem = p.with_suffix("") if p.suffix in (".safetensors", ".json") else p
    return stem.with_suffix(".safetensors"), stem.with_suffix(".json")


def _read_saved(
    path: str | os.PathLike[str], kind: str, what: str
) -> tuple[Path, dict[str, Any], dict[str, torch.Tensor]]:
    """The JSON file, its metadata and the tensors of a saved intervention of ``kind``.

    Raises:
        CheckpointError: a file is missing or damaged, or it holds another kind.
    """
    st, js = _paths(path)
    if not st.exists() or not js.exists():
        raise CheckpointError(
            f"{what} needs {st.name} and {js.name} in {st.parent}", fix=_EXTRACT_FIX
        )
    meta = read_json_file(js, what=f"{what} metadata", fix=_EXTRACT_FIX)
    if meta.get("kind") != kind:
        raise CheckpointError(f"{js} holds a {meta.get('kind')!r}, not a {what}", fix=_EXTRACT_FIX)
    return js, meta, load_safetensors_file(st, what=what, fix=_EXTRACT_FIX)


def _load_saved(
    path: str | os.PathLike[str],
    kind: str,
    what: str,
    build: Callable[[dict[str, Any], dict[str, torch.Tensor]], _T],
    built: str,
) -> _T:
    """Read a saved intervention of ``kind`` and ``build(meta, tensors)`` it.

    Args:
        path: Either file of the pair, or their common stem.
        kind: The ``kind`` its metadata must name.
        what: What the files hold, for messages about reading them.
        build: Makes the object from the metadata and the tensors.
        built: What the object is, for messages about building it.

    Raises:
        CheckpointError: a file is missing or damaged, holds another kind, or does not build.
    """
    js, meta, tensors = _read_saved(path, kind, what)
    return build_from_file(js, lambda: build(meta, tensors), what=built, fix=_EXTRACT_FIX)


def _write_saved(
    path: str | os.PathLike[str], tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> Path:
    """Write ``tensors`` to ``<path>.safetensors`` and ``meta`` to ``<path>.json``.

    The tensors go through an atomic path so a crash never leaves a half-written file beside
    valid metadata. Returns the safetensors path.
    """
    from safetensors.torch import save_file

    st, js = _paths(path)
    with atomic_path(st) as tmp:
        save_file(tensors, str(tmp))
    write_json(js, meta)
    return st


@dataclass
class SteeringDirection:
    """A residual-stream steering direction.

    Attributes:
        vector: (hidden,) float32; ``alpha = 1`` shifts activations by the full mean difference.
        layer: Decoder layer index whose output (or input, see ``site``) is steered.
        concept: Concept name (e.g. ``"ee_speed"``).
        meta: Extraction metadata (contrast sets, counts, norms, model name).
        site: ``"output"`` (the layer's output, the references' choice) or ``"input"`` (the
            residual stream entering the layer; layer 0's input is the embeddings: ours, it
            reaches what layer 0's attention reads).
        position: None: every position of the prefill and of each decode step (the
            references'). k >= 1: only the prompt's k-th position from its end (1 = the last
            prompt token), once in the prefill (ours: the position of a concept word). It
            counts from the end of whatever the layer sees, so it suits generation (the
            prefill ends with the prompt), not a teacher-forced pass with action tokens.
    """

    vector: torch.Tensor
    layer: int
    concept: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    site: str = "output"
    position: int | None = None

    def __post_init__(self) -> None:
        if self.site not in STEERING_SITES:
            raise ConfigError(
                f"steering site {self.site!r} is not one of {list(STEERING_SITES)}",
                fix="use output (the layer's output) or input (the residual stream entering it)",
            )
        if self.position is not None and int(self.position) < 1:
            raise ConfigError(
                f"steering position {self.position} must be >= 1 (1 = the last prompt token)",
                fix="count prompt positions from its end, or leave it None for every position",
            )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``<path>.safetensors`` and ``<path>.json``; returns the safetensors path."""
        return _write_saved(
            path,
            {"direction": self.vector.detach().float().cpu().contiguous()},
            {
                "kind": "direction",
                "layer": self.layer,
                "concept": self.concept,
                "hidden_size": int(self.vector.numel()),
                "site": self.site,
                "position": self.position,
                "meta": self.meta,
            },
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SteeringDirection:
        """Inverse of :meth:`save`."""
        return _load_saved(
            path,
            "direction",
            "steering direction",
            lambda meta, t: cls(
                t["direction"],
                int(meta["layer"]),
                meta.get("concept", ""),
                meta.get("meta", {}),
                meta.get("site", "output"),  # saved before sites existed: the output
                meta.get("position"),
            ),
            "steering direction",
        )


@dataclass
class NeuronCluster:
    """Selected MLP neurons of one layer and the activation they are overwritten with.

    Attributes:
        layer: Decoder layer index.
        neurons: Indices into the MLP intermediate (``down_proj`` input) dimension.
        values: Activation per neuron at ``alpha = 1``.
        concept: Concept name.
        meta: Selection metadata.
    """

    layer: int
    neurons: torch.Tensor
    values: torch.Tensor
    concept: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``<path>.safetensors`` and ``<path>.json``."""
        return _write_saved(
            path,
            {
                "neurons": self.neurons.long().cpu().contiguous(),
                "values": self.values.float().cpu().contiguous(),
            },
            {"kind": "neurons", "layer": self.layer, "concept": self.concept, "meta": self.meta},
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NeuronCluster:
        """Inverse of :meth:`save`."""
        return _load_saved(
            path,
            "neurons",
            "neuron cluster",
            lambda meta, t: cls(
                int(meta["layer"]),
                t["neurons"],
                t["values"],
                meta.get("concept", ""),
                meta.get("meta", {}),
            ),
            "neuron cluster",
        )


def load_intervention(path: str | os.PathLike[str]) -> SteeringDirection | NeuronCluster:
    """Load a saved direction or neuron cluster (the alpha-steerable kinds) by its JSON ``kind``.

    Raises:
        CheckpointError: missing or damaged files, or another kind (value-vector neuron sets
            are a fixed-coefficient intervention: :meth:`ValueVectorNeurons.load`).
    """
    _, js = _paths(path)
    if not js.exists():
        raise CheckpointError(
            f"no {js}", fix="pass the path written by `embodied lab steer extract`"
        )
    kind = read_json_file(js, what="steering intervention metadata", fix=_EXTRACT_FIX).get("kind")
    if kind == "direction":
        return SteeringDirection.load(path)
    if kind == "neurons":
        return NeuronCluster.load(path)
    raise CheckpointError(
        f"{js} holds a {kind!r} intervention, which has no alpha knob; kinds: direction, neurons",
        fix="pass a direction or neuron cluster from `embodied lab steer extract` (value-vector "
        "neuron sets load with ValueVectorNeurons.load and steer with ValueVectorHook)",
    )


class SteeringHook:
    """Forward hook adding ``alpha * direction`` (or overwriting neurons) while attached.

    Args:
        model: The OpenVLA model.
        intervention: A :class:`SteeringDirection` or :class:`NeuronCluster`.
        alpha: Initial strength; change it any time with :attr:`alpha`.
    """

    def __init__(
        self,
        model: OpenVLAModel,
        intervention: SteeringDirection | NeuronCluster,
        alpha: float = 0.0,
    ) -> None:
        n_layers = len(model.decoder_layers)
        if not 0 <= intervention.layer < n_layers:
            raise ConfigError(
                f"steering layer {intervention.layer} outside the model's 0..{n_layers - 1}",
                fix="extract the direction from this model",
            )
        self.model = model
        self.intervention = intervention
        self.alpha = float(alpha)
        self.calls = 0
        self._handle: Any = None
        dev, dt = model.device, model.dtype
        if isinstance(intervention, SteeringDirection):
            if intervention.vector.numel() != model.config.llm_dim:
                raise ConfigError(
                    f"direction has {intervention.vector.numel()} dims, model hidden size is "
                    f"{model.config.llm_dim}",
                    fix="extract the direction from this model",
                )
            self._vec = intervention.vector.to(device=dev, dtype=dt).reshape(-1)
        else:
            self._idx = intervention.neurons.to(dev).long()
            self._val = intervention.values.to(device=dev, dtype=dt)

    @property
    def attached(self) -> bool:
        """Whether the hook is registered."""
        return self._handle is not None

    def attach(self) -> SteeringHook:
        """Register the hook (idempotent).

        Raises:
            ConfigError: Another steering hook is attached to the same model (a policy that was
                never closed): its last alpha would silently add to this one's, so an
                "unsteered" alpha = 0 would still be steered.
        """
        if self._handle is None:
            live: list[SteeringHook] = self.model.__dict__.setdefault("_steering_hooks", [])
            if live:
                raise ConfigError(
                    f"the model already has a steering hook attached (layer "
                    f"{live[0].intervention.layer}, alpha {live[0].alpha:g}); two hooks would "
                    "add up",
                    fix="close() the policy that attached it (OpenVLAPolicy.close) first",
                )
            live.append(self)
            layer = self.model.decoder_layers[self.intervention.layer]
            if isinstance(self.intervention, SteeringDirection):
                if self.intervention.site == "input":
                    self._handle = layer.register_forward_pre_hook(
                        self._add_input, with_kwargs=True
                    )
                else:
                    self._handle = layer.register_forward_hook(self._add)
            else:
                mlp: Any = layer.mlp
                self._handle = mlp.down_proj.register_forward_pre_hook(self._overwrite)
        return self

    def remove(self) -> None:
        """Unregister the hook; the model is exactly as before."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
            live = self.model.__dict__.get("_steering_hooks", [])
            if self in live:
                live.remove(self)

    def __enter__(self) -> SteeringHook:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _shift(self, h: torch.Tensor) -> torch.Tensor | None:
        """``h`` steered, or None where this call leaves it alone."""
        assert isinstance(self.intervention, SteeringDirection)
        k = self.intervention.position
        if k is None:
            return h + self.alpha * self._vec
        # one prompt position: present only in the prefill (a decode step has one position)
        if h.shape[1] <= 1 or h.shape[1] < k:
            return None
        h = h.clone()
        h[:, -k] += self.alpha * self._vec
        return h

    def _add(self, module: nn.Module, args: Any, output: Any) -> Any:
        self.calls += 1
        if self.alpha == 0.0:
            return None
        h = self._shift(output[0] if isinstance(output, tuple) else output)
        if h is None:
            return None
        return (h, *output[1:]) if isinstance(output, tuple) else h

    def _add_input(self, module: nn.Module, args: Any, kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        if self.alpha == 0.0:
            return None
        h = self._shift(args[0] if args else kwargs["hidden_states"])
        if h is None:
            return None
        if args:
            return (h, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": h}

    def _overwrite(self, module: nn.Module, args: Any) -> Any:
        self.calls += 1
        if self.alpha == 0.0:
            return None
        x = args[0].clone()
        x[..., self._idx] = self.alpha * self._val
        return (x, *args[1:])


# ---------------------------------------------------------------------------------------------
# extraction
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def collect_activations(
    model: OpenVLAModel,
    pixel_values: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    layer: int,
    n_last: int,
    site: str = "residual",
    batch_size: int = 32,
    position: int | None = None,
) -> torch.Tensor:
    """Mean activation over the last ``n_last`` positions of each row at decoder ``layer``.

    Args:
        model: The model.
        pixel_values: (N, 6, H, W).
        input_ids: (N, T) left-padded prompts (+ teacher-forced action tokens).
        attention_mask: (N, T).
        layer: Decoder layer index.
        n_last: Positions averaged (e.g. those that generate the action tokens).
        site: ``"residual"`` (layer output), ``"input"`` (the residual stream entering the
            layer; layer 0's input is the embeddings) or ``"mlp"`` (``down_proj`` input).
        batch_size: Rows per forward pass.
        position: If given, the activation at this one position counted from the end (1 = the
            last) instead of the mean over ``n_last``.

    Returns:
        (N, hidden) or (N, intermediate) float32 activations.
    """
    target = model.decoder_layers[layer]
    store: list[torch.Tensor] = []

    def grab(t: torch.Tensor) -> None:
        rows = t[:, -n_last:] if position is None else t[:, -position : t.shape[1] - position + 1]
        store.append(rows.float().mean(1).cpu())

    if site == "residual":
        handle = target.register_forward_hook(
            lambda m, a, o: grab(o[0] if isinstance(o, tuple) else o)
        )
    elif site == "input":
        handle = target.register_forward_pre_hook(
            lambda m, a, k: grab(a[0] if a else k["hidden_states"]), with_kwargs=True
        )
    elif site == "mlp":
        mlp: Any = target.mlp
        handle = mlp.down_proj.register_forward_pre_hook(lambda m, a: grab(a[0]))
    else:
        raise ConfigError(
            f"unknown activation site {site!r}; use 'residual', 'input' or 'mlp'",
            fix="use residual (a layer's output)",
        )
    try:
        for i in range(0, len(input_ids), batch_size):
            sl = slice(i, i + batch_size)
            emb, mask, pos, _ = model.embed(
                pixel_values[sl].to(model.device),
                input_ids[sl].to(model.device),
                attention_mask[sl].to(model.device),
            )
            model.language_model.model(
                inputs_embeds=emb, attention_mask=mask, position_ids=pos, use_cache=False
            )
    finally:
        handle.remove()
    return torch.cat(store, 0)


def mean_difference(
    positive: torch.Tensor,
    negative: torch.Tensor,
    layer: int,
    concept: str = "",
    meta: dict[str, Any] | None = None,
) -> SteeringDirection:
    """Difference-of-means direction ``mean(positive) - mean(negative)`` with its statistics."""
    if len(positive) == 0 or len(negative) == 0:
        raise ConfigError(
            f"contrast sets must be non-empty (got {len(positive)} positive, {len(negative)} negative)",
            fix="collect demonstrations at both ends of the concept (e.g. fast and slow)",
        )
    mu_p, mu_n = positive.mean(0), negative.mean(0)
    vec = mu_p - mu_n
    proj_p = (positive @ vec).numpy()
    proj_n = (negative @ vec).numpy()
    pooled = float(np.sqrt(0.5 * (proj_p.var() + proj_n.var())) + 1e-12)
    info = {
        "n_positive": len(positive),
        "n_negative": len(negative),
        "norm": float(vec.norm()),
        "mean_activation_norm": float(torch.cat([positive, negative]).norm(dim=1).mean()),
        "separation_d": float((proj_p.mean() - proj_n.mean()) / pooled),
        **(meta or {}),
    }
    return SteeringDirection(vec.float(), layer, concept, info)


def select_neurons(
    positive: torch.Tensor,
    negative: torch.Tensor,
    layer: int,
    k: int = 16,
    concept: str = "",
    meta: dict[str, Any] | None = None,
) -> NeuronCluster:
    """The ``k`` MLP neurons whose mean activation differs most (in pooled std units).

    Their overwrite value at ``alpha = 1`` is the positive set's mean activation.
    """
    mu_p, mu_n = positive.mean(0), negative.mean(0)
    sd = torch.sqrt(0.5 * (positive.var(0) + negative.var(0))) + 1e-6
    score = (mu_p - mu_n) / sd
    idx = torch.argsort(score.abs(), descending=True)[:k]
    return NeuronCluster(
        layer,
        idx,
        mu_p[idx].float(),
        concept,
        {"k": k, "scores": score[idx].tolist(), **(meta or {})},
    )


# ---------------------------------------------------------------------------------------------
# Häon et al. 2025: FFN value vectors projected onto the vocabulary, neurons set to a constant
# ---------------------------------------------------------------------------------------------


@dataclass
class ValueVectorNeurons:
    """Neurons across decoder layers whose FFN value vectors promote concept tokens.

    The fixed-coefficient intervention of Häon et al. 2025, "Mechanistic interpretability for
    steering vision-language-action models" (reference code
    ``vla-mech-interp/mechanistic-steering-vlas``): the value vector of MLP neuron ``i`` of
    layer ``l`` is column ``i`` of that layer's ``down_proj`` weight (``down_proj(one_hot_i)``
    in ``ffn_value_vectors/extract.py``); its vocabulary projection is ``lm_head.weight @ v``;
    during generation every selected neuron's activation (the ``down_proj`` input) is set to
    one constant ``coef`` at every position (``libero_experiments/hooks.py``).

    Attributes:
        neurons: (n, 2) long tensor of (layer, neuron) pairs.
        coef: The constant the activations are set to (the reference's ``intervention.coef``).
        concept: Concept name (e.g. ``"slowly"``).
        meta: Selection metadata (concept tokens, top-k, the projected tokens of each neuron).
    """

    neurons: torch.Tensor
    coef: float = 1.0
    concept: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> dict[int, list[int]]:
        """Layer -> neuron indices (the reference's ``values_per_layer``)."""
        out: dict[int, list[int]] = {}
        for layer, neuron in self.neurons.long().tolist():
            out.setdefault(int(layer), []).append(int(neuron))
        return out

    def flat_indices(self, intermediate_size: int) -> list[int]:
        """Flat indices ``layer * intermediate_size + neuron`` as in the reference dictionaries."""
        return [int(lay) * intermediate_size + int(n) for lay, n in self.neurons.long().tolist()]

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``<path>.safetensors`` and ``<path>.json``."""
        return _write_saved(
            path,
            {"neurons": self.neurons.long().cpu().contiguous()},
            {
                "kind": "value_vectors",
                "coef": self.coef,
                "concept": self.concept,
                "meta": self.meta,
            },
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ValueVectorNeurons:
        """Inverse of :meth:`save`."""
        return _load_saved(
            path,
            "value_vectors",
            "value-vector neuron set",
            lambda meta, t: cls(
                t["neurons"], float(meta["coef"]), meta.get("concept", ""), meta.get("meta", {})
            ),
            "value-vector neurons",
        )


def _intermediate_size(model: OpenVLAModel) -> int:
    mlp: Any = model.decoder_layers[0].mlp
    return int(mlp.down_proj.in_features)


def ffn_value_vectors(model: OpenVLAModel) -> torch.Tensor:
    """All FFN value vectors, (n_layers * intermediate, hidden) float32, layer-major.

    Row ``l * intermediate + i`` is ``down_proj(one_hot_i)`` of layer ``l`` (= weight column
    ``i``; the Llama ``down_proj`` has no bias), as ``extract_value_vectors`` of the reference.
    """
    rows = []
    for layer in model.decoder_layers:
        mlp: Any = layer.mlp
        w = mlp.down_proj.weight.detach().float()  # (hidden, intermediate)
        rows.append(w.t())
    return torch.cat(rows, 0)


def value_vector_logits(model: OpenVLAModel) -> torch.Tensor:
    """Vocabulary projection of every value vector: ``values @ lm_head.weight.T``.

    (n_layers * intermediate, vocab) float32; as the reference, the raw unembedding without the
    final RMSNorm.
    """
    lm_head: Any = model.language_model.lm_head
    return ffn_value_vectors(model) @ lm_head.weight.detach().float().t()


def select_value_vector_neurons(
    model: OpenVLAModel,
    token_ids: list[int],
    n: int = 10,
    top_k: int = 10,
    coef: float = 1.0,
    concept: str = "",
    meta: dict[str, Any] | None = None,
) -> ValueVectorNeurons:
    """The ``n`` neurons whose value vectors most promote ``token_ids``.

    Following the reference point by point: every value vector is projected onto the
    vocabulary and its ``top_k`` tokens are listed (``top_k = 10`` there); a neuron is a
    candidate when a concept token is among its top-k tokens. The authors then hand-pick
    10 or 20 candidates per concept (``dictionaries.yaml``); our automatic stand-in for that
    curation (an extension, named here) ranks the candidates by their largest concept-token
    logit and keeps the first ``n``.

    Args:
        model: The model.
        token_ids: Token ids of the concept words (e.g. ``slowly``).
        n: Neurons to keep (fewer when fewer are candidates).
        top_k: Tokens listed per value vector.
        coef: The constant of the returned intervention.
        concept: Concept name.
        meta: Extra metadata.

    Raises:
        ConfigError: No token ids, or no value vector has a concept token in its top-k.
    """
    if not token_ids:
        raise ConfigError("no concept tokens to select value vectors for", fix="name the words")
    logits = value_vector_logits(model)
    inter = _intermediate_size(model)
    ids = torch.as_tensor(token_ids, dtype=torch.long)
    top = torch.topk(logits, k=min(top_k, logits.shape[1]), dim=1).indices
    candidate = torch.isin(top, ids).any(1)
    score = logits[:, ids].max(1).values
    flat = torch.nonzero(candidate).flatten()
    if flat.numel() == 0:
        raise ConfigError(
            f"no FFN value vector has a concept token {token_ids} among its top {top_k} tokens",
            fix="raise the top-k or name other concept words",
        )
    flat = flat[torch.argsort(score[flat], descending=True)][:n]
    neurons = torch.stack([flat // inter, flat % inter], 1)
    info = {
        "token_ids": list(map(int, token_ids)),
        "top_k": top_k,
        "n_requested": n,
        "n_candidates": int(candidate.sum()),
        "flat_indices": flat.tolist(),
        "scores": score[flat].tolist(),
        "top_tokens": top[flat].tolist(),
        "selection": "top-k contains a concept token; ranked by concept logit (our stand-in "
        "for the authors' manual curation)",
        **(meta or {}),
    }
    return ValueVectorNeurons(neurons, float(coef), concept, info)


class ValueVectorHook:
    """Sets the selected neurons' activations (``down_proj`` inputs) to :attr:`coef`.

    One forward pre-hook per layer that holds selected neurons; every position of the prefill
    and of each cached decode step is set, as the reference's ``down_proj`` hook (which writes
    the constant into the input and recomputes the linear map: the same output).

    Args:
        model: The OpenVLA model.
        intervention: The neurons.
        coef: The constant (default: ``intervention.coef``); change it any time.
    """

    def __init__(
        self, model: OpenVLAModel, intervention: ValueVectorNeurons, coef: float | None = None
    ) -> None:
        n_layers = len(model.decoder_layers)
        inter = _intermediate_size(model)
        for layer, idx in intervention.layers.items():
            if not 0 <= layer < n_layers or not all(0 <= i < inter for i in idx):
                raise ConfigError(
                    f"value-vector neuron ({layer}, {idx}) outside the model's "
                    f"{n_layers} layers x {inter} neurons",
                    fix="select the neurons on this model",
                )
        self.model = model
        self.intervention = intervention
        self.coef = float(intervention.coef if coef is None else coef)
        self.calls = 0
        self._handles: list[Any] = []

    @property
    def attached(self) -> bool:
        """Whether the hooks are registered."""
        return bool(self._handles)

    def attach(self) -> ValueVectorHook:
        """Register the hooks (idempotent)."""
        if not self._handles:
            for layer, idx in self.intervention.layers.items():
                mlp: Any = self.model.decoder_layers[layer].mlp
                index = torch.as_tensor(idx, dtype=torch.long, device=self.model.device)
                self._handles.append(mlp.down_proj.register_forward_pre_hook(self._setter(index)))
        return self

    def remove(self) -> None:
        """Unregister the hooks; the model is exactly as before."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> ValueVectorHook:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _setter(self, index: torch.Tensor) -> Any:
        def hook(module: nn.Module, args: Any) -> Any:
            self.calls += 1
            x = args[0].clone()
            x[..., index] = self.coef
            return (x, *args[1:])

        return hook
