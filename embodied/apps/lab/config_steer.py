"""The options of the steering experiment (:class:`SteerExperimentConfig`,
:class:`ExperimentSettings`), apart from the experiment so that ``embodied train --help`` and
``embodied lab steer --help`` build their options without importing torch.

:mod:`embodied.apps.lab.steer` re-exports both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from embodied.apps.training.config_vla import TinyVLAConfig
from embodied.config import Rule, checked, validate

CONTINUUM_LEVELS = 9
"""Levels of the ``continuum`` speed labels, "at speed 1" .. "at speed 9"."""
CONTINUUM_WORDS = tuple(str(k) for k in range(1, CONTINUUM_LEVELS + 1))
"""The words of those levels, slowest first."""
POSITIONS = ("last", "text", "action", "word")
"""Contrast positions of direction extraction (``word``: the speed word's own)."""
SITES = ("output", "input")
"""Where a direction is added: a decoder layer's output or its input. The component's own
``policies.openvla.steering.STEERING_SITES`` (which needs torch) is held equal by a test."""
STEER_CONCEPTS = ("speed", "height")
"""What graded demonstrations vary and the controllers track: the end-effector's cruise speed
(m/s) or its cruise height above the table (m)."""
CONCEPT_UNITS = {"speed": "m/s", "height": "m"}
"""Units of each concept's measure."""
HEIGHT_START_M = (0.33, -0.28, 0.15)
"""Fingertip start (x, y, z) in m of the height concept's episodes: beside the cubes, so every
target is 0.15 m or more away horizontally and each episode has a level cruise to measure (from
the home pose, above the middle of the table, a cube can lie right below the fingertip), and
the arm crosses the front camera's view rather than coming at it (from behind the cubes the
tiny VLA misjudged where to descend: depth is what one front view shows worst)."""
HEIGHT_CRUISE_RADIUS_M = 0.08
"""The height concept's ``level`` expert descends onto the target within this horizontal
distance (its ``cone_radius``), and the height is measured only farther out. Wider than the
expert's 0.05 m default: trained on that shorter descent (about 10 control steps at 0.1 m/s)
the tiny VLA often flew past the cube at low heights."""


DESCENT_START_M = (0.03, 0.09)
"""Horizontal distances (m, min, max) from the target at which the height concept's descent
demonstrations (``height_descents``) start: inside :data:`HEIGHT_CRUISE_RADIUS_M` and just
beyond it, where a steered arm released over the target begins its descent."""


def _arm_reach_limits() -> tuple[float, tuple[float, float]]:
    """The arm_reach expert's highest hover (m) and its ``start`` reset option's (min, max)
    height (m), imported when a config is checked: importing mujoco for every
    ``embodied lab steer --help`` would slow the CLI."""
    from sim.mujoco.arm_reach import MAX_HOVER_M, START_Z_M

    return MAX_HOVER_M, START_Z_M


def height_meta(
    height_range: Sequence[float],
    height_speed: float,
    start_range: Sequence[float] | None,
    descents: int = 0,
) -> dict[str, Any]:
    """The height concept's demonstration settings as written to a dataset's meta and a
    dial's report (``start_range`` None: every episode from :data:`HEIGHT_START_M`;
    ``descents``: the added descent episodes)."""
    return {
        "height_range": [float(v) for v in height_range],
        "height_speed": float(height_speed),
        "height_start_range": None if start_range is None else [float(v) for v in start_range],
        "height_descents": int(descents),
    }


def height_expert_kwargs(speed: float) -> dict[str, Any]:
    """The height concept's scripted expert (``policies.load("expert", ...)`` keyword
    arguments): the ``level`` approach at ``speed`` m/s, descending within
    :data:`HEIGHT_CRUISE_RADIUS_M`. The demonstrations add their ``hover_range``; the
    experiment's reference row flies it at the setpoint's height."""
    return {"approach": "level", "speed": float(speed), "cone_radius": HEIGHT_CRUISE_RADIUS_M}


ARM_TAU_S = 0.2
"""Time constant (s) of the arm_reach arm's speed response to the knob: the PID's IMC gains
assume it and its reference filter defaults to it."""


@dataclass(frozen=True)
class SteerExperimentConfig(TinyVLAConfig):
    """What :func:`steer_experiment` steers and how it finds the direction (the evaluation is
    :class:`ExperimentSettings`); ``embodied lab steer extract`` shares the direction fields.

    The env and the tiny VLA's fields (``env_id``, ``layout``, ``image_size``, ``llm_layers``,
    ``demonstration_episodes``) are :class:`~embodied.apps.training.config_vla.TinyVLAConfig`'s.

    Args:
        model: OpenVLA checkpoint folder or hub id (None: train the tiny VLA on the env).
        preset: Processor preset of ``model`` (openvla, libero or as_trained; None: the env's,
            see ``policies.openvla.policy_openvla.PRESETS``). A tiny VLA trained here on the
            env's own frames and actions (e.g. ``lab steer dial``'s OUT/vla) is as_trained.
        direction: Saved direction or neuron cluster (None: extract one).
        dataset: Recorded demonstrations to extract the direction from (LIBERO: required).
        image_key: Camera key in the dataset.
        kind: Intervention kind: direction | neurons.
        layer: Decoder layer (None: the middle one, (n-1)//2).
        positions: Contrast positions: last | action | text (averaged; the direction is added
            at every position) or word (the speed word's own prompt position, and the
            direction is added there only; ours; needs named speeds).
        site: Where the direction is read and added: output (the layer's output) or input (the
            residual stream entering it; layer 0's input is the embeddings; ours).
        neurons: Neurons in a neuron cluster (kind neurons).
        unnorm_key: Dataset statistics key of the model.
        extraction_episodes: Fresh demonstration episodes per (level, target) to extract the
            direction from.
        train_steps: Tiny model: BC steps.
        bc_sampling: Tiny model: how BC batches draw demonstration steps: steps (uniformly)
            or episodes (each episode weighs the same, so slow demonstrations, which have more
            steps, do not dominate what an unnamed prompt learns; ours).
        retrain: Retrain the tiny model even if OUT/vla exists.
        pid_kp: PID kp (None: both gains from the fixed-alpha sweep).
        pid_ki: PID ki (1/s).
        speed_labels: How the tiny VLA's demonstration prompts name the speed: adverbs (three
            named classes, the earlier experiment), none (continuous speeds, plain prompt) or
            continuum (continuous speeds, an ordered "at speed 1..9" scale).
        speed_range: Demonstration cruise speeds (min, max) in m/s (none and continuum).
        unnamed_fraction: Fraction of the demonstration episodes (continuum or adverbs) whose
            prompt leaves the speed unnamed: the plain instruction the evaluation sends then
            means "the average speed", as classifier-free guidance drops its condition (ours;
            0: every prompt names its speed, the earlier data).
        method: Direction extraction: mean_difference, paired or probe (``embodied lab steer dial``
            compares all three).
        instruction_suffix: Words appended to the env's instruction while the VLA is steered
            (e.g. "at speed 5" under continuum labels: the VLA runs at a named nominal speed
            that the direction moves; empty: the plain instruction).
        speed_embedding: Tiny model under continuum labels: free (each "at speed k" number its
            own token embedding) or line (the nine numbers' embeddings tied to one line, evenly
            spaced: ``BCSettings.ordinal_words``; ours).
        concept: What the graded demonstrations vary (``speed_labels`` none or continuum):
            speed (cruise speed drawn from ``speed_range``) or height (cruise height: the
            ``level`` expert at ``height_speed`` with a hover height above the target drawn
            from ``height_range``, from a start beside the cubes; labels "at height k"; ours).
        height_range: Height concept: hover heights (min, max) above the target's grasp point
            in m (the cruise heights above the table are 0.048 m higher).
        height_speed: Height concept: the demonstrations' cruise speed (m/s).
        height_start_range: Height concept: (min, max) fingertip start height above the table
            of the demonstrations (m), drawn per episode beside the cubes. A range shows the
            tiny VLA each height under each prompt, so it learns to climb or sink to its
            prompt's height from wherever it is; from one start height it learns one climb and
            does not correct off it (behaviour cloning's covariate shift; ours). Steered and
            evaluation episodes always start at ``HEIGHT_START_M``.
        height_descents: Height concept: demonstration episodes added that start near the
            target (``DESCENT_START_M`` from it) at a height drawn from
            ``height_start_range``, so every prompt is shown descending onto the cube from
            many heights: a steered arm, released over the target, starts its descent off its
            prompt's height (ours; 0: cruise episodes only, the earlier data).
    """

    model: str | None = None
    preset: str | None = checked(
        None,
        choices=(None, "openvla", "libero", "as_trained"),
        fix="use openvla, libero or as_trained",
    )
    direction: Path | None = None
    dataset: Path | None = None
    image_key: str = "image.front"
    kind: str = "direction"
    layer: int | None = None
    positions: str = checked("last", choices=POSITIONS, fix="use last, text, action or word")
    site: str = checked("output", choices=SITES, fix="use output or input")
    neurons: int = 64
    unnorm_key: str | None = None
    extraction_episodes: int = 1
    train_steps: int = 2000
    bc_sampling: str = checked("steps", choices=("steps", "episodes"), fix="use steps or episodes")
    retrain: bool = False
    pid_kp: float | None = None
    pid_ki: float | None = None
    speed_labels: str = "adverbs"
    speed_range: tuple[float, float] = (0.04, 0.25)
    unnamed_fraction: float = checked(0.0, ge=0.0, le=1.0, fix="use a fraction in [0, 1]")
    method: str = "mean_difference"
    instruction_suffix: str = ""
    speed_embedding: str = checked("free", choices=("free", "line"), fix="use free or line")
    concept: str = checked("speed", choices=STEER_CONCEPTS, fix="use speed or height")
    height_range: tuple[float, float] = (0.03, 0.15)
    height_speed: float = checked(0.08, gt=0, le=0.3, fix="use e.g. 0.08 (m/s)")
    height_start_range: tuple[float, float] = (HEIGHT_START_M[2], HEIGHT_START_M[2])
    height_descents: int = checked(0, ge=0, fix="use a count of episodes, e.g. 96")

    rules: ClassVar[tuple[Rule, ...]] = (
        *TinyVLAConfig.rules,
        Rule(
            "speed_embedding",
            lambda c: c.speed_embedding == "free" or c.speed_labels == "continuum",
            "ties the numbers of 'at speed k' to a line, but speed_labels is {speed_labels!r}",
            "add --speed-labels continuum, or use --speed-embedding free",
        ),
        Rule(
            "concept",
            lambda c: c.concept == "speed" or c.speed_labels != "adverbs",
            "varies the height, but speed_labels adverbs names three speed classes",
            "add --speed-labels continuum (or none)",
        ),
        Rule(
            "height_range",
            lambda c: 0 < c.height_range[0] < c.height_range[1] <= _arm_reach_limits()[0],
            lambda c: f"is not (min, max) heights in m within (0, {_arm_reach_limits()[0]:g}]",
            "use e.g. --height-range 0.03,0.15",
        ),
        Rule(
            "height_start_range",
            lambda c: (
                _arm_reach_limits()[1][0]
                <= c.height_start_range[0]
                <= c.height_start_range[1]
                <= _arm_reach_limits()[1][1]
            ),
            lambda c: (
                "is not (min, max) start heights in m within the arm's reach [{:g}, {:g}]".format(
                    *_arm_reach_limits()[1]
                )
            ),
            "use e.g. --height-start-range 0.06,0.22",
        ),
        Rule(
            "height_descents",
            lambda c: (
                not c.height_descents
                or (c.concept == "height" and c.height_start_range[0] < c.height_start_range[1])
            ),
            "starts descents at drawn heights, but concept is {concept!r} and "
            "height_start_range {height_start_range!r}",
            "add --concept height --height-start-range MIN,MAX, or drop --height-descents",
        ),
    )

    def ordinal_words(self) -> tuple[str, ...]:
        """The words :class:`BCSettings` ties to a line (none under a free embedding)."""
        return CONTINUUM_WORDS if self.speed_embedding == "line" else ()


@dataclass
class ExperimentSettings:
    """What the steering experiment runs (the defaults are the fair protocol of issue #15).

    Seeds: the tiny VLA's demonstrations use 0, 1, ...; the tuning rollouts (fixed-alpha sweep
    for alpha* and the PID gains, the Häon constant) ``tuning_seed`` onwards; PPO's training
    episodes ``rl_seed`` onwards; the evaluation ``seed`` onwards. The ranges must not overlap
    (:func:`check_disjoint_seeds`).

    Args:
        setpoint: Target end-effector speed in m/s.
        episodes: Evaluation episodes per controller row.
        seed: First evaluation seed (episodes use seed, seed+1, ...).
        tuning_seed: First tuning seed (every sweep point and Häon constant uses the same ones).
        alpha_limit: Knob bounds and controller output limits (+/-).
        sweep_alphas: Fixed alphas of the tuning sweep (alpha*, PID gains).
        sweep_episodes: Tuning episodes per sweep point and per Häon constant.
        haeon_coefs: Häon et al. constants tried on the tuning seeds (as many as sweep_alphas).
        haeon_words: Instruction words whose tokens pick the Häon neurons (setpoint's side).
        haeon_neurons: Häon neurons kept (the reference's dictionaries hold 10 or 20).
        haeon_top_k: Projected tokens listed per value vector (the reference's top_k).
        pid: PID gains/limits (``controllers.make("pid", **pid)``); empty = derive from the sweep.
        rl_timesteps: PPO timesteps for the RL controller (0 = skip the RL row).
        rl_seed: First inner-episode seed of PPO's training episodes.
        rl_train_seed: Seed of PPO itself (its network's initial weights, exploration noise
            and minibatch order); ``rl_seed`` sets the scenes it trains on.
        rl_controller: An RL controller trained by an earlier run (its ``OUT/rl_controller``
            folder) to evaluate instead of training one (``rl_timesteps`` is then unused; the
            row reports the timesteps it was trained for). Its knob range must be
            +/- alpha_limit; the run that trained it must have used the same model, direction
            and seeds for its figures to stand beside this run's.
        rl_observe_setpoint: PPO's controller also observes the setpoint (one actor serves
            every setpoint, as PID's feedforward does); off: error, integral, derivative, last
            command and progress only (the earlier controller, which must find each
            setpoint's command by feedback alone).
        rl_setpoint_range: The setpoints PPO trains on (drawn per episode): ``targets`` (0.7x
            the lowest to 1.3x the highest evaluated setpoint, the earlier rule) or
            ``working_range`` (ours: the mean concept values of the tuning sweep's working
            range, :func:`~embodied.apps.lab.steer.working_range`, widened just enough to
            hold every evaluated setpoint), so PPO does not spend its episodes on setpoints
            that no alpha reaches with success held.
        rl_error_weight: Weight of the tracking error in PPO's reward
            (:attr:`~controllers.rl.configuration_rl.RLControllerConfig.error_weight`; 1: the
            earlier reward; ours).
        rl_log_std_init: Initial log standard deviation of PPO's Gaussian policy (its
            exploration noise, in units of the largest command step; -0.5: the earlier
            setting). Less noise keeps exploration off a cliff of the dial near the command it
            holds; measured, it lowers the error at low and middle setpoints and raises it at
            a high one (docs/openvla-steering.md).
        concept: What is measured and tracked: speed (end-effector speed, m/s, EMA-filtered
            by ``concept_tau_s``) or height (fingertip height above the table, m, measured
            while the fingertip is farther than ``HEIGHT_CRUISE_RADIUS_M`` horizontally from
            the target; setpoints, RMSE and the sweep are then in m).
        concept_tau_s: EMA time constant of the speed measurement (s).
        band: Settling band as a fraction of the setpoint step.
        reset_options: Inner-env reset options (e.g. a fixed cube layout).
        setpoints: Target speeds (m/s) of the comparison, each evaluated with every row (empty:
            ``setpoint`` alone); alpha* and the Häon constant are chosen per setpoint, PID's gains
            and PPO's controller (trained over the whole range) serve all of them.
        setpoint_change_s: With two or more setpoints, add rows (PID, RL) whose setpoint steps
            from the lowest to the highest at this time (s) in each episode (0: none).
        pid_fit: How PID's static gain d speed / d alpha is fitted on the sweep: working_range
            (the contiguous sweep points around alpha = 0 that keep the success floor) or
            half_range (every point with |alpha| <= alpha_limit / 2, the earlier rule).
        pid_feedforward: static: PID's output starts from the alpha the sweep's fitted line
            gives the setpoint (bias + kff * setpoint) and feedback trims the rest; sweep: from
            the alpha interpolated between the fitted sweep points themselves (a dial that
            bends near its ends is inverted where it bends; ours); none: it starts from
            alpha = 0 (the earlier rule, whose integrator winds up while the arm accelerates
            from rest).
        pid_reference_tau_s: Time constant (s) of the rise the PID's feedback expects after a
            start from rest or a setpoint change (``PIDConfig.setpoint_tau_s``: the feedback
            acts on the setpoint filtered by it, the feedforward on the setpoint; ours). The
            default is the arm's time constant that the PID's IMC gains assume; 0: the
            feedback acts on the setpoint itself (the earlier PID, whose integrator winds up
            while the arm rises from rest).
        steady_transient_s: The steady-state RMSE beside the whole-episode one leaves out this
            long after the start (from rest) and after each setpoint change (s).
        expert_reference: Add a reference row per setpoint: the env's scripted expert driven at
            exactly the setpoint (speed, or cruise height), unsteered (the RMSE no controller
            of the VLA can be expected to beat: the arm still rises from rest and the filter
            still lags).
        release_outside_concept: Where the concept is undefined (the height over the target,
            where the task descends), set alpha to 0 instead of holding the controller's
            output, for every controller row, the fixed-alpha sweep and PPO's training (ours;
            Häon et al.'s constant intervention stays on). False: hold (the earlier rule).
        reference_expert: The reference expert's other kwargs (``steer_experiment`` sets them
            to the demonstrations' expert: height: ``approach`` level at ``height_speed``).
        min_success_ratio: The best fixed alpha* (and Häon constant) must keep this fraction of
            the unsteered success on the tuning seeds (the sweep's alpha = 0 point); 0: the
            closest mean speed regardless of success (the earlier rule).
    """

    config_name: ClassVar[str] = "steer experiment"

    setpoint: float = checked(0.06, gt=0, fix="use a positive speed in m/s, e.g. 0.06")
    episodes: int = checked(30, ge=1, fix="use e.g. 30")
    seed: int = 10_000
    tuning_seed: int = 5_000
    alpha_limit: float = 4.0
    sweep_alphas: tuple[float, ...] = (-4.0, -2.0, -1.0, -0.75, -0.625, -0.5, -0.25, 0.0)
    sweep_episodes: int = checked(10, ge=0, fix="use e.g. 10")
    haeon_coefs: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    haeon_words: tuple[str, ...] = ("slowly",)
    haeon_neurons: int = 10
    haeon_top_k: int = 10
    pid: dict[str, Any] = field(default_factory=dict)
    rl_timesteps: int = checked(100_000, ge=0, fix="use e.g. 100000")
    rl_seed: int = 1_000_000
    rl_train_seed: int = 0
    rl_controller: Path | None = None
    rl_observe_setpoint: bool = True
    rl_setpoint_range: str = checked(
        "targets",
        choices=("targets", "working_range"),
        fix="use targets (0.7x-1.3x the setpoints) or working_range (the sweep's)",
    )
    rl_error_weight: float = checked(1.0, gt=0, fix="use e.g. 1 (the earlier reward) or 5")
    rl_log_std_init: float = checked(-0.5, le=2, fix="use e.g. -0.5 (the earlier setting) or -1.5")
    concept: str = checked("speed", choices=STEER_CONCEPTS, fix="use speed or height")
    concept_tau_s: float = 0.1
    band: float = 0.1
    reset_options: dict[str, Any] = field(default_factory=dict)
    min_success_ratio: float = checked(
        0.9, ge=0, le=1, fix="use 0.9 (keep 90 % of unsteered success) or 0 (ignore success)"
    )
    setpoints: tuple[float, ...] = checked(
        (), gt=0, fix="give positive speeds in m/s, e.g. --setpoints 0.06,0.1,0.15"
    )
    setpoint_change_s: float = checked(0.0, ge=0, fix="e.g. 1.0, or 0 for no setpoint-change rows")
    pid_fit: str = checked(
        "working_range", choices=("working_range", "half_range"), fix="use working_range"
    )
    pid_feedforward: str = checked(
        "static",
        choices=("static", "sweep", "none"),
        fix="use static (the fitted line), sweep (the fitted points) or none",
    )
    pid_reference_tau_s: float = checked(ARM_TAU_S, ge=0, fix="use e.g. 0.2 (s), or 0 for none")
    steady_transient_s: float = checked(0.5, ge=0, fix="use e.g. 0.5 (s)")
    expert_reference: bool = True
    release_outside_concept: bool = False
    reference_expert: dict[str, Any] = field(default_factory=dict)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "sweep_alphas",
            lambda c: all(abs(a) <= c.alpha_limit for a in c.sweep_alphas),
            "exceed alpha_limit={alpha_limit}",
            "raise --alpha-limit or lower the sweep alphas",
        ),
        Rule(
            "haeon_coefs",
            lambda c: not c.haeon_coefs or len(c.haeon_coefs) == len(c.sweep_alphas),
            lambda c: (
                f"has {len(c.haeon_coefs)} Häon constants but {len(c.sweep_alphas)} "
                "sweep alphas: the baselines get the same tuning budget"
            ),
            "give as many --haeon-coefs as --sweep-alphas (or none to skip the Häon row)",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def knob_rest(self) -> float | None:
        """The knob's value where the concept is undefined (``Steering.rest``): 0 under
        ``release_outside_concept``, else None (the controller's output is held)."""
        return 0.0 if self.release_outside_concept else None

    def targets(self) -> tuple[float, ...]:
        """The setpoints evaluated (m/s): ``setpoints``, or ``(setpoint,)``."""
        return tuple(self.setpoints) or (self.setpoint,)

    def seed_ranges(self, training: tuple[int, int] = (0, 0)) -> dict[str, tuple[int, int]]:
        """Half-open seed ranges ``[first, end)`` of every stage (``training`` = the VLA's)."""
        return {
            "training": training,
            "tuning": (self.tuning_seed, self.tuning_seed + self.sweep_episodes),
            "rl_training": (self.rl_seed, self.rl_seed + self.rl_timesteps),
            "evaluation": (self.seed, self.seed + self.episodes),
        }


@dataclass
class DialSettings:
    """What ``embodied lab steer dial`` measures: the dose-response of each extraction method.

    Args:
        methods: Extraction methods compared (mean_difference, paired, probe).
        alphas: Fixed steering strengths of the dose-response (must include 0).
        episodes: Tuning episodes per alpha (distinct scenes on a random layout).
        tuning_seed: First tuning seed (apart from the demonstrations' seeds 0..n-1).
        demonstrations: Graded demonstration episodes the tiny VLA trains on (and the
            directions are extracted from); 48 is ``steer experiment``'s budget (4 per speed
            class and cube colour).
        min_success: Success rate the working range keeps (fraction).
        alpha_limit: Knob bounds (+/-).
    """

    config_name: ClassVar[str] = "steer dial"

    methods: tuple[str, ...] = ("mean_difference", "paired", "probe")
    alphas: tuple[float, ...] = (-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0)
    episodes: int = checked(10, ge=1, fix="use episodes >= 1")
    tuning_seed: int = 5_000
    demonstrations: int = checked(48, ge=2, fix="use demonstrations >= 2")
    min_success: float = 0.9
    alpha_limit: float = 4.0

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "alphas", lambda c: 0.0 in c.alphas, "lack 0 (the unsteered point)", "add 0 to --alphas"
        ),
        Rule(
            "alphas",
            lambda c: all(abs(a) <= c.alpha_limit for a in c.alphas),
            "exceed alpha_limit={alpha_limit}",
            "raise --alpha-limit or lower the alphas",
        ),
        Rule(
            "tuning_seed",
            lambda c: c.tuning_seed >= c.demonstrations,
            lambda c: f"overlaps the demonstration seeds 0..{c.demonstrations - 1}",
            lambda c: f"use --tuning-seed {max(5000, c.demonstrations)}",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
