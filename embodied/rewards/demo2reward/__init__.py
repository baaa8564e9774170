"""Demo2Reward: tune a judge's instruction on a few labelled demonstrations to cut false
positives.

from embodied.rewards import load_judge
from embodied.rewards.demo2reward import load_demonstrations, optimize_instruction

judge = load_judge("minijudge")
result = optimize_instruction(judge, load_demonstrations("demonstrations/"))
print(result.template, result.best.rates)
"""

from embodied.rewards.demo2reward.demonstrations import (
    FALLBACK_TASKS,
    LabelledDemonstration,
    load_demonstrations,
    record_demonstration,
    save_demonstrations,
    split_demonstrations,
    task_text,
)
from embodied.rewards.demo2reward.objective import (
    DemonstrationSet,
    Evaluation,
    Misclassified,
    objective,
)
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
    "DemonstrationSet",
    "Evaluation",
    "LLMProposer",
    "LabelledDemonstration",
    "Misclassified",
    "OfflineProposer",
    "OptimizationResult",
    "ProposalContext",
    "Proposer",
    "load_demonstrations",
    "load_instruction",
    "objective",
    "optimize_instruction",
    "record_demonstration",
    "save_demonstrations",
    "save_result",
    "split_demonstrations",
    "task_text",
]
