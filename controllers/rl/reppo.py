"""RePPO: PPO that optimises ReMax, the expected maximum return over M retries.

Reference: Nishimori, Parmas, Koyamada, Kozuno, Kitamura, Ishii, Matsuo, "Emergence of
Exploration in Policy Gradient Reinforcement Learning via Retrying" (ICML 2026,
arXiv:2606.00151) and its official code, github.com/nissymori/remax-rl, file
``agents/minatar/reppo.py`` (JAX). This module ports that file to stable-baselines3, point by
point:

* **Objective** (``docs/math.tex`` of the reference): ``J_M(pi) = E_{R~Pi} E_{a_1..a_M~pi}
  [max_i R(a_i)]`` - a return function is drawn once (return uncertainty) and the policy is
  scored by the best of M retries under it. M = 1 is the ordinary expected return.
* **Critic**: a Q head, one output per action (reference ``ActorCritic``: ``critic =
  nn.Dense(num_actions)``); the state value is ``V(s) = sum_a pi(a|s) Q(s, a)``, which is what
  GAE bootstraps from (reference ``_calculate_gae``: ``value = sum(probs * q_values)``). The
  critic is regressed on the GAE lambda-return of the taken action, ``Q(s_t, a_t) -> R_t``
  (reference ``_loss_fn``, ``q_value = take_along_axis(q_values, action)``).
* **Advantage** (reference ``expected_improvement_min`` and ``calc_remax_advantage``, called
  by the agent as ``calc_remax_advantage(targets, traj_batch.q_values, probs,
  traj_batch.action, args.M-1, ...)``): the other ``M - 1`` retries at state s draw actions
  ``A ~ pi`` and are valued by the reference values ``q'``: the (rollout) Q values with the
  taken action's entry replaced by its sampled return R (``replace_q``, ``replace_type=
  "return"``: a retry of the same action meets the same return draw). ``EI(x; q') =
  E[(x - max_{j<M} q'_{A_j})_+]`` is the expected improvement of x over the best of those
  retries. The signal is ``EI(R; q')``; the baseline scores the *original* Q value of every
  action against the same ``q'`` and averages under pi, ``sum_b pi_b EI(q_b; q')``
  (reference: ``q_plus = expected_improvement_min(q, q_ref_for_q, ...)``), so
  ``A = EI(R; q') - sum_b pi_b EI(q_b; q')``. With the actions sorted by q' (descending) and
  ``C_k`` the cumulative policy mass, ``EI(x; q') = v_0 + sum_k (v_{k+1} - v_k) (1 -
  C_k)^(m-1)`` with ``v_k = (x - q'_(k))_+``: the probability that all ``m - 1`` retries fall
  below rank k is ``(1 - C_k)^(m-1)``, which is defined for any real m - this is the paper's
  continuous retry count ``m > 0``. (The reference passes ``M - 1`` to
  ``expected_improvement_min``; ``1 - C_k`` is clipped to ``[1e-8, 1]`` as there.) Checked
  against values produced by the reference's own JAX functions (copied verbatim) at
  m = 0.5 ... 4, with and without ``replace_q``
  (``tests/controllers/fixtures/reppo_reference_advantage.json``).
* **PPO update**: the advantage is normalised per minibatch with the population std
  (reference: ``(a - a.mean()) / (a.std() + 1e-8)``, ``jnp.std``) and used in the clipped
  surrogate; value loss and entropy bonus are SB3's; ``use_current_probs`` (reference default
  True) recomputes pi in EI and the baseline with the current (detached) policy at every
  minibatch.

Deviations from the reference (labelled *our choice*):

* **m = 1 exactly** in :class:`RePPO` is plain PPO with the Q critic: no retries, so ``J_1``
  is the expected return and the update uses SB3's GAE advantages and SB3's advantage
  normalisation (unbiased std) unchanged (bit-identical to ``PPO`` with
  :class:`QActorCriticPolicy`; tested). The reference's formula at exponent 0 is not PPO's
  advantage: there every weight ``(1 - C_k)^0`` is 1, ``EI(x; q') = (x - min q')_+``, and
  ``A = (R - min q')_+ - sum_b pi_b (q_b - min q')_+``, which with ``replace_q`` equals
  ``R - sum_b pi_b q_b - pi_a (min q' - q_a)_+`` (a = the taken action) and without it
  ``R - sum_b pi_b q_b + (min q - R)_+``. :func:`remax_advantage` computes the reference
  formula at m = 1 unless ``ppo_at_m1=True`` (our extension).
  **The m = 1 arm is therefore not the m -> 1 limit of the family.** The formula is
  continuous in m (we measured ``|A(m=1+1e-6) - A(m=1)| <= 3e-5`` on 100000 random samples),
  but it jumps away from the PPO arm: between m = 1 (PPO) and m = 1 + 1e-6 the advantage
  changes by ``pi_a (min q' - q_a)_+`` with ``replace_q`` - nonzero only where the taken
  action's Q is below every other Q and below its own return. Measured (float64; q ~ N(0, 1),
  R ~ N(0, 4), pi = softmax(1.5 N(0, 1)), K = 6, a ~ pi, 100000 samples): with ``replace_q``
  12 % of samples jump, by 0.029 on average and up to 2.94; without it 28 %, mean 0.36, up
  to 7.9. On the fixture's three batches the largest jump is 0.10 (``replace_q``) and 2.04
  (without).
* The value loss is SB3's (unclipped unless ``clip_range_vf`` is set; the reference clips it);
  the old Q values are recomputed at the start of ``train()`` with the unchanged rollout
  parameters instead of being stored during the rollout.
* Only ``replace_type="return"`` of the reference is ported (its default and the one used in
  its ``sh/run_minatar.sh``).
* ``m`` must be finite and > 0 (the paper's range; its MinAtar sweep uses 0.8 ... 3.0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import RolloutBufferSamples
from stable_baselines3.common.utils import explained_variance
from torch import nn
from torch.nn import functional as F

from embodied.errors import ConfigError

__all__ = ["QActorCriticPolicy", "RePPO", "expected_improvement", "remax_advantage"]

_EPS = 1e-8  # reference: eps in expected_improvement_min


def _probs(distribution: Any) -> th.Tensor:
    """Action probabilities (B, K) of an SB3 categorical distribution."""
    return distribution.distribution.probs  # type: ignore[no-any-return]


class QActorCriticPolicy(ActorCriticPolicy):
    """Actor-critic with a Q head (one value per discrete action).

    ``forward``/``predict_values`` return ``V(s) = sum_a pi(a|s) Q(s, a)`` (what the rollout
    buffer stores and GAE bootstraps from); ``evaluate_actions`` returns ``Q(s, a)`` of the
    given actions, so SB3's value loss regresses Q of the taken action on the lambda-return
    (reference ``agents/minatar/reppo.py``, ``_loss_fn``). Plain :class:`PPO` with this policy
    is the reference's PPO-Q baseline (``agents/minatar/ppo_q.py``).

    Args:
        *args: As :class:`~stable_baselines3.common.policies.ActorCriticPolicy`.
        **kwargs: As :class:`~stable_baselines3.common.policies.ActorCriticPolicy`.

    Raises:
        ConfigError: The action space is not discrete.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        action_space = kwargs.get("action_space", args[1] if len(args) > 1 else None)
        if not isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                f"a Q critic needs a Discrete action space, got {action_space}",
                fix="discretise the actions (e.g. a gymnasium wrapper with a few fixed commands)",
            )
        super().__init__(*args, **kwargs)

    @property
    def n_actions(self) -> int:
        """Number of discrete actions (outputs of the Q head)."""
        return int(self.action_space.n)  # type: ignore[attr-defined]

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # SB3 builds a 1-output value head; swap it for a Q head, initialised as SB3 does
        # (orthogonal, gain 1), and rebuild the optimiser over the new parameters.
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, self.n_actions)
        if self.ortho_init:
            self.value_net.apply(lambda m: BasePolicy.init_weights(m, gain=1))
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def _latents(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        features = self.extract_features(obs)
        if self.share_features_extractor:
            return self.mlp_extractor(features)  # type: ignore[no-any-return]
        pi_features, vf_features = features
        return (
            self.mlp_extractor.forward_actor(pi_features),
            self.mlp_extractor.forward_critic(vf_features),
        )

    def forward(
        self, obs: th.Tensor, deterministic: bool = False
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Actions, ``V = sum_a pi_a Q_a`` (shape (B, 1)) and log-probabilities."""
        latent_pi, latent_vf = self._latents(obs)
        q = self.value_net(latent_vf)
        distribution = self._get_action_dist_from_latent(latent_pi)
        probs = _probs(distribution)
        values = (probs * q).sum(dim=-1, keepdim=True)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob  # type: ignore[misc]

    def q_and_probs(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Q values (B, K) and action probabilities (B, K)."""
        latent_pi, latent_vf = self._latents(obs)
        distribution = self._get_action_dist_from_latent(latent_pi)
        return self.value_net(latent_vf), _probs(distribution)

    def predict_values(self, obs: th.Tensor) -> th.Tensor:  # type: ignore[override]
        """``V(s) = sum_a pi(a|s) Q(s, a)``, shape (B, 1)."""
        q, probs = self.q_and_probs(obs)
        return (probs * q).sum(dim=-1, keepdim=True)

    def evaluate_q(
        self, obs: th.Tensor, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """One pass: all Q values (B, K), log pi(actions), entropy, probabilities (B, K)."""
        latent_pi, latent_vf = self._latents(obs)
        distribution = self._get_action_dist_from_latent(latent_pi)
        log_prob = distribution.log_prob(actions)
        q = self.value_net(latent_vf)
        entropy = distribution.entropy()
        assert entropy is not None  # categorical: analytic entropy
        return q, log_prob, entropy, _probs(distribution)

    def evaluate_actions(  # type: ignore[override]
        self, obs: th.Tensor, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``Q(s, a)`` of the given actions (B, 1), their log-probabilities and the entropy."""
        q, log_prob, entropy, _ = self.evaluate_q(obs, actions)
        q_taken = q.gather(1, actions.long().reshape(-1, 1))
        return q_taken, log_prob, entropy


def check_m(m: float) -> float:
    """Validate the retry parameter ``m`` (finite, > 0).

    Args:
        m: Retry count (integer M) or its continuous extension.

    Returns:
        ``m`` as a float.

    Raises:
        ConfigError: ``m`` is not a finite number > 0.
    """
    try:
        value = float(m)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"RePPO m must be a finite number > 0 (the number of retries M, or its continuous "
            f"extension), got m={m!r}",
            fix="use m=1 for plain PPO or m > 1 for more exploration (the paper sweeps 0.8 ... 3)",
        )
    return value


def expected_improvement(x: th.Tensor, q: th.Tensor, pi: th.Tensor, m: float) -> th.Tensor:
    """``EI(x) = E[(x - max_{j<m} q_{A_j})_+]`` with ``m - 1`` retries ``A_j ~ pi`` i.i.d.

    Port of the reference ``expected_improvement_min`` (which takes the exponent ``m - 1``):
    with actions sorted by q descending and ``C_k`` the cumulative probability of the top
    ``k + 1`` actions, ``EI(x) = v_0 + sum_{k<K-1} (v_{k+1} - v_k) (1 - C_k)^(m-1)``,
    ``v_k = (x - q_(k))_+``; ``1 - C_k`` is clipped to ``[1e-8, 1]`` as in the reference.

    Args:
        x: Values to score, shape (B, N).
        q: Action values of the retries, shape (B, K).
        pi: Action probabilities, shape (B, K).
        m: Retry count (> 0, real).

    Returns:
        Shape (B, N).
    """
    order = th.argsort(-q, dim=-1, stable=True)
    q_sorted = q.gather(-1, order)
    pi_sorted = pi.gather(-1, order)
    cum = th.cumsum(pi_sorted, dim=-1)
    v = th.clamp(x.unsqueeze(-1) - q_sorted.unsqueeze(1), min=0.0)  # (B, N, K)
    dv = v[..., 1:] - v[..., :-1]
    w = th.clamp(1.0 - cum[:, :-1], _EPS, 1.0) ** (m - 1.0)  # (B, K-1)
    return v[..., 0] + (dv * w.unsqueeze(1)).sum(dim=-1)


def remax_advantage(
    returns: th.Tensor,
    q: th.Tensor,
    pi: th.Tensor,
    actions: th.Tensor,
    m: float,
    replace_q: bool = True,
    *,
    ppo_at_m1: bool = False,
) -> th.Tensor:
    """ReMax advantage ``EI(R; q') - sum_b pi_b EI(q_b; q')`` of the taken actions.

    Port of the reference ``calc_remax_advantage`` (``agents/minatar/reppo.py``) with
    ``use_baseline=True`` and ``replace_type="return"``, called as the reference agent calls it
    (exponent ``m - 1``). ``q'`` is ``q`` with the taken action's entry replaced by its return R
    when ``replace_q`` (else ``q' = q``); ``EI(x; q')`` is :func:`expected_improvement` of x
    over the best of ``m - 1`` retries ``A ~ pi`` valued by ``q'``. The signal scores the return
    R against ``q'``; the baseline scores the *original* Q values ``q_b`` of every action
    against the same ``q'`` and averages them under pi (reference: ``R_plus =
    expected_improvement_min(R, q_ref_for_R, ...)``, ``q_plus = expected_improvement_min(q,
    q_ref_for_q, ...)``, ``baseline = sum(pi * q_plus)``). At ``m == 1`` this is the reference
    formula at exponent 0, ``(R - min q')_+ - sum_b pi_b (q_b - min q')_+`` - not PPO's
    advantage (see the module docstring).

    Args:
        returns: Sampled returns R of the taken actions (lambda-returns), shape (B,).
        q: Q values of all actions, shape (B, K).
        pi: Action probabilities, shape (B, K).
        actions: Taken actions, shape (B,), integer.
        m: Retry count (> 0, real).
        replace_q: Value a retry of the taken action by R instead of its Q value (reference
            default of the agent).
        ppo_at_m1: *Our extension*, off by default: at ``m == 1`` exactly return
            ``R - sum_b pi_b q_b`` (PPO's advantage with the Q critic) instead of the
            reference formula; other m are unaffected.

    Returns:
        Advantages, shape (B,).
    """
    m = check_m(m)
    if ppo_at_m1 and m == 1.0:
        return returns - (pi * q).sum(dim=-1)
    idx = actions.long().reshape(-1, 1)
    q_ref = q.scatter(1, idx, returns.reshape(-1, 1)) if replace_q else q
    signal = expected_improvement(returns.reshape(-1, 1), q_ref, pi, m)[:, 0]
    q_plus = expected_improvement(q, q_ref, pi, m)  # (B, K): original Q scored against q'
    return signal - (pi * q_plus).sum(dim=-1)


@dataclass(frozen=True)
class _RolloutQ:
    """The rollout's Q values ``(N, K)`` and probabilities ``(N, K)`` per flattened buffer
    sample; both None for m = 1 (plain PPO needs neither)."""

    q: th.Tensor | None
    pi: th.Tensor | None


@dataclass
class _TrainStats:
    """What one :meth:`RePPO.train` logs: one entry per minibatch, ``approx_kl_divs`` for the
    last epoch only (as SB3's PPO), and the last minibatch's loss."""

    entropy_losses: list[float] = field(default_factory=list)
    pg_losses: list[float] = field(default_factory=list)
    value_losses: list[float] = field(default_factory=list)
    clip_fractions: list[float] = field(default_factory=list)
    adv_means: list[float] = field(default_factory=list)
    adv_stds: list[float] = field(default_factory=list)
    improvements: list[float] = field(default_factory=list)
    approx_kl_divs: list[float] = field(default_factory=list)
    loss: th.Tensor = field(default_factory=lambda: th.zeros(()))


class RePPO(PPO):
    """PPO on the ReMax objective (expected best return over ``m`` retries).

    See the module docstring for the method and its reference. The SB3 interface is
    unchanged: ``learn``, ``predict``, ``save``/``load`` and the logger (``train/*`` as in PPO,
    plus ``reppo/*``: the advantage's mean and std before normalisation, the mean expected
    improvement of the return over the retries, the Q spread, and ``m``).

    Args:
        policy: Policy class or alias; ``"MlpPolicy"``/``"CnnPolicy"`` give
            :class:`QActorCriticPolicy` (a Q critic is required).
        env: Environment with a Discrete action space.
        m: Retry count M (integers: the ReMax objective with M retries) or its continuous
            extension m > 0. ``m = 1`` is PPO with a Q critic, exactly; larger m explores more.
        replace_q: Value a retry of the taken action by its sampled return (reference default).
        use_current_probs: Recompute pi in the advantage with the current (detached) policy
            at every minibatch (reference default); False uses the rollout policy.
        **kwargs: Everything else as :class:`~stable_baselines3.PPO`.

    Raises:
        ConfigError: ``m`` is not finite and > 0, or the policy has no Q head.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {  # type: ignore[misc]
        "MlpPolicy": QActorCriticPolicy,
        "CnnPolicy": QActorCriticPolicy,
    }

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: Any,
        m: float = 1.2,
        replace_q: bool = True,
        use_current_probs: bool = True,
        **kwargs: Any,
    ) -> None:
        self.m = check_m(m)
        self.replace_q = bool(replace_q)
        self.use_current_probs = bool(use_current_probs)
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        if not isinstance(self.policy, QActorCriticPolicy):
            raise ConfigError(
                f"RePPO needs a policy with a Q head, got {type(self.policy).__name__}",
                fix="use policy='MlpPolicy' or a subclass of controllers.rl.reppo.QActorCriticPolicy",
            )

    def _minibatches(self, batch_size: int) -> Any:
        """SB3's ``RolloutBuffer.get`` with the sample indices (same RNG use), flattening once."""
        buf: RolloutBuffer = self.rollout_buffer
        n = buf.buffer_size * buf.n_envs
        indices = np.random.permutation(n)
        if not buf.generator_ready:
            for name in ("observations", "actions", "values", "log_probs", "advantages", "returns"):
                buf.__dict__[name] = buf.swap_and_flatten(buf.__dict__[name])
            buf.generator_ready = True
        for start in range(0, n, batch_size):
            inds = indices[start : start + batch_size]
            yield inds, buf._get_samples(inds)

    def train(self) -> None:
        """One PPO update on the rollout buffer with ReMax advantages (SB3's ``PPO.train``)."""
        policy: QActorCriticPolicy = self.policy  # type: ignore[assignment]
        policy.set_training_mode(True)
        self._update_learning_rate(policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_vf = (
            self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]
            if self.clip_range_vf is not None
            else None
        )
        rollout = self._rollout_q_and_probs(policy)
        stats = _TrainStats()
        continue_training = True
        for epoch in range(self.n_epochs):
            stats.approx_kl_divs = []
            for inds, data in self._minibatches(self.batch_size):
                loss, approx_kl_div = self._minibatch_loss(
                    policy, inds, data, rollout, clip_range, clip_range_vf, stats
                )
                stats.loss = loss
                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(
                            f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}"
                        )
                    break

                policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(policy.parameters(), self.max_grad_norm)
                policy.optimizer.step()

            self._n_updates += 1
            if not continue_training:
                break
        self._record_train(stats, clip_range, clip_range_vf, rollout)

    def _rollout_q_and_probs(self, policy: QActorCriticPolicy) -> _RolloutQ:
        """Rollout Q values and probabilities per flattened buffer sample (none for m = 1).

        The parameters are unchanged since the rollout, so evaluating the buffer now gives the
        rollout's values; the reference stores them in its Transition instead.
        """
        if self.m == 1.0:
            return _RolloutQ(None, None)
        buf = self.rollout_buffer
        obs = buf.observations
        if not buf.generator_ready:
            obs = buf.swap_and_flatten(obs)
        with th.no_grad():
            q_old, pi_old = policy.q_and_probs(buf.to_torch(obs))
        return _RolloutQ(q_old, pi_old)

    def _minibatch_loss(
        self,
        policy: QActorCriticPolicy,
        inds: np.ndarray,
        data: RolloutBufferSamples,
        rollout: _RolloutQ,
        clip_range: float,
        clip_range_vf: float | None,
        stats: _TrainStats,
    ) -> tuple[th.Tensor, np.ndarray]:
        """PPO's clipped loss on one minibatch, its statistics appended to ``stats``.

        Args:
            policy: The policy being trained.
            inds: The minibatch's indices into the flattened rollout buffer.
            data: The minibatch (SB3's ``RolloutBufferSamples``).
            rollout: The rollout's Q values and probabilities.
            clip_range: PPO's ratio clip.
            clip_range_vf: The value clip around the rollout's values (None: unclipped).
            stats: This update's statistics so far.

        Returns:
            The loss and the approximate KL divergence from the rollout policy.
        """
        actions = data.actions
        if isinstance(self.action_space, spaces.Discrete):
            actions = data.actions.long().flatten()
        q_all, log_prob, entropy, probs = policy.evaluate_q(data.observations, actions)
        values = q_all.gather(1, actions.reshape(-1, 1)).flatten()
        advantages = self._advantages(inds, data, actions, probs, rollout, stats)

        ratio = th.exp(log_prob - data.old_log_prob)
        policy_loss_1 = advantages * ratio
        policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
        policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()
        stats.pg_losses.append(policy_loss.item())
        stats.clip_fractions.append(th.mean((th.abs(ratio - 1) > clip_range).float()).item())

        q_old = rollout.q
        if clip_range_vf is None:
            values_pred = values
        else:  # clip around the rollout Q(s, a) (reference), or V for m = 1 (as SB3)
            old = (
                data.old_values
                if q_old is None
                else q_old[th.as_tensor(inds)].gather(1, actions.reshape(-1, 1)).flatten()
            )
            values_pred = old + th.clamp(values - old, -clip_range_vf, clip_range_vf)
        value_loss = F.mse_loss(data.returns, values_pred)
        stats.value_losses.append(value_loss.item())
        entropy_loss = -th.mean(entropy)
        stats.entropy_losses.append(entropy_loss.item())
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

        with th.no_grad():
            log_ratio = log_prob - data.old_log_prob
            approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
            stats.approx_kl_divs.append(float(approx_kl_div))
        return loss, approx_kl_div

    def _advantages(
        self,
        inds: np.ndarray,
        data: RolloutBufferSamples,
        actions: th.Tensor,
        probs: th.Tensor,
        rollout: _RolloutQ,
        stats: _TrainStats,
    ) -> th.Tensor:
        """The minibatch's advantages: GAE's for m = 1, else ReMax's; normalised if asked.

        Args:
            inds: The minibatch's indices into the flattened rollout buffer.
            data: The minibatch (SB3's ``RolloutBufferSamples``).
            actions: The actions taken (indices for a Discrete space).
            probs: The current policy's probabilities (used detached).
            rollout: The rollout's Q values and probabilities.
            stats: This update's statistics so far (the advantage's, before normalisation).
        """
        plain = self.m == 1.0
        if plain:
            advantages = data.advantages
        else:
            q_old, pi_old = rollout.q, rollout.pi
            assert q_old is not None and pi_old is not None
            t_inds = th.as_tensor(inds, device=q_old.device)
            q_b = q_old[t_inds]
            pi_b = probs.detach() if self.use_current_probs else pi_old[t_inds]
            with th.no_grad():
                advantages = remax_advantage(
                    data.returns, q_b, pi_b, actions, self.m, self.replace_q
                )
                q_ref = (
                    q_b.scatter(1, actions.reshape(-1, 1), data.returns.reshape(-1, 1))
                    if self.replace_q
                    else q_b
                )
                stats.improvements.append(
                    expected_improvement(data.returns.reshape(-1, 1), q_ref, pi_b, self.m)
                    .mean()
                    .item()
                )
        stats.adv_means.append(advantages.mean().item())
        stats.adv_stds.append(advantages.std().item() if len(advantages) > 1 else 0.0)
        if self.normalize_advantage and len(advantages) > 1:
            # m = 1: SB3's PPO (unbiased std); ReMax: the reference's population std
            std = advantages.std() if plain else advantages.std(unbiased=False)
            advantages = (advantages - advantages.mean()) / (std + 1e-8)
        return advantages

    def _record_train(
        self,
        stats: _TrainStats,
        clip_range: float,
        clip_range_vf: float | None,
        rollout: _RolloutQ,
    ) -> None:
        """Log one update's statistics (``train/*`` as SB3's PPO, plus ``reppo/*``)."""
        explained_var = explained_variance(
            self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten()
        )
        self.logger.record("train/entropy_loss", np.mean(stats.entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(stats.pg_losses))
        self.logger.record("train/value_loss", np.mean(stats.value_losses))
        self.logger.record("train/approx_kl", np.mean(stats.approx_kl_divs))
        self.logger.record("train/clip_fraction", np.mean(stats.clip_fractions))
        self.logger.record("train/loss", stats.loss.item())
        self.logger.record("train/explained_variance", explained_var)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)
        self.logger.record("reppo/m", self.m)
        self.logger.record("reppo/advantage_mean", float(np.mean(stats.adv_means)))
        self.logger.record("reppo/advantage_std", float(np.mean(stats.adv_stds)))
        if stats.improvements:
            self.logger.record("reppo/expected_improvement", float(np.mean(stats.improvements)))
        q_old = rollout.q
        if q_old is not None:
            spread = (q_old.max(dim=-1).values - q_old.min(dim=-1).values).mean().item()
            self.logger.record("reppo/q_spread", spread)
