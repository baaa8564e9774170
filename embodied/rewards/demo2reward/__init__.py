"""Demo2Reward: tune a judge's instruction on a few labelled demonstrations to cut false
positives (https://github.com/cgumbsch/Demo2Reward).

from embodied.rewards import load_judge
from embodied.rewards.demo2reward import load_demonstrations, optimize_instruction

critic = load_judge("critic:Qwen/Qwen3-VL-8B-Instruct")  # the reference's default Critic
# the reference Meta-Critic on the same model (single-model mode); 100 iterations x 5 repeats
result = optimize_instruction(critic, load_demonstrations("demonstrations/"))
print(result.template, result.best.rates)

The reference's default Critic is Qwen3-VL-8B-Instruct (``demo2reward.py``: ``--vlm`` default
``qwen3_8b``, loaded by ``vlms/qwen_utils.py: get_qwen3_8b``) and its Meta-Critic the same model
(``--meta_vlm`` defaults to ``--vlm``; ``qwen3_32b`` is the larger option). The project names no
default model: ``critic:MODEL`` / ``--proposer-model`` take any image-text-to-text model.
"""

from embodied.rewards.demo2reward.demonstrations import (
    FALLBACK_TASKS,
    PAST_LEN,
    LabelledDemonstration,
    load_demonstrations,
    past_frame_indices,
    record_demonstration,
    sample_indices,
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
from embodied.rewards.demo2reward.prompts import (
    generic_template,
    parse_binary,
    parse_final_instruction,
)
from embodied.rewards.demo2reward.proposers import (
    DEFAULT_TEMPLATE,
    PROPOSERS,
    REAL_ROBOT_TEMPLATE,
    LLMProposer,
    PhraseBankAblation,
    ProposalContext,
    Proposer,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "FALLBACK_TASKS",
    "PAST_LEN",
    "PROPOSERS",
    "REAL_ROBOT_TEMPLATE",
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
    "generic_template",
    "load_demonstrations",
    "load_instruction",
    "objective",
    "optimize_instruction",
    "parse_binary",
    "parse_final_instruction",
    "past_frame_indices",
    "record_demonstration",
    "sample_indices",
    "save_demonstrations",
    "save_result",
    "split_demonstrations",
    "task_text",
]
