"""Demo2Reward: tune a judge's instruction on a few labelled demonstrations to cut false
positives (https://github.com/cgumbsch/Demo2Reward).

from embodied.rewards import load_judge
from embodied.rewards.demo2reward import load_demonstrations, optimize_instruction

critic = load_judge("critic:Qwen/Qwen2.5-VL-7B-Instruct")  # the reference Critic
# the reference Meta-Critic on the same model (single-model mode); 100 iterations x 5 repeats
result = optimize_instruction(critic, load_demonstrations("demonstrations/"))
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
from embodied.rewards.demo2reward.metacritic import ReferenceMetaCritic, default_proposer
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
from embodied.rewards.demo2reward.prompts import parse_binary, parse_final_instruction
from embodied.rewards.demo2reward.proposers import (
    DEFAULT_TEMPLATE,
    PROPOSERS,
    LLMProposer,
    PhraseBankAblation,
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
    "OptimizationResult",
    "PhraseBankAblation",
    "ProposalContext",
    "Proposer",
    "ReferenceMetaCritic",
    "default_proposer",
    "load_demonstrations",
    "load_instruction",
    "objective",
    "optimize_instruction",
    "parse_binary",
    "parse_final_instruction",
    "record_demonstration",
    "save_demonstrations",
    "save_result",
    "split_demonstrations",
    "task_text",
]
