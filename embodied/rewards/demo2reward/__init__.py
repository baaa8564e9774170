"""Demo2Reward: tune a judge's instruction on a few labelled demos to cut false positives.

from embodied.rewards import load_judge
from embodied.rewards.demo2reward import load_demos, optimize_instruction

judge = load_judge("minijudge")
result = optimize_instruction(judge, load_demos("demos/"))
print(result.template, result.best.rates)
"""

from embodied.rewards.demo2reward.demonstrations import (
    FALLBACK_TASKS,
    LabelledDemo,
    load_demos,
    record_demo,
    save_demos,
    split_demos,
    task_text,
)
from embodied.rewards.demo2reward.objective import DemoSet, Evaluation, Misclassified, objective
from embodied.rewards.demo2reward.optimization import (
    Demo2RewardConfig,
    OptimizationResult,
    load_instruction,
    optimize_instruction,
    save_result,
)
from embodied.rewards.demo2reward.proposers import (
    DEFAULT_TEMPLATE,
    PROPOSERS,
    LLMProposer,
    OfflineProposer,
    ProposalContext,
    Proposer,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "FALLBACK_TASKS",
    "PROPOSERS",
    "Demo2RewardConfig",
    "DemoSet",
    "Evaluation",
    "LLMProposer",
    "LabelledDemo",
    "Misclassified",
    "OfflineProposer",
    "OptimizationResult",
    "ProposalContext",
    "Proposer",
    "load_demos",
    "load_instruction",
    "objective",
    "optimize_instruction",
    "record_demo",
    "save_demos",
    "save_result",
    "split_demos",
    "task_text",
]
