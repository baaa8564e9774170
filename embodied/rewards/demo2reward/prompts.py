"""Demo2Reward's prompts and answer parsing, verbatim from the reference implementation.

Reference: https://github.com/cgumbsch/Demo2Reward (``utils/prompts.py``, ``utils/critic.py``,
``vlms/vlm_utils.py``). Every string here is copied character for character; the comment
above each names the reference file and symbol. ``{robot_desc}`` is "a simulated robot"
(default) or "a robot" (the reference's ``--real_robot``).
"""

from __future__ import annotations

import re
from typing import Any

# utils/prompts.py: META_CRITIC_TEMPLATE (the Meta-Critic's system prompt with its principles)
META_CRITIC_TEMPLATE = """\
You are the Meta-Critic, an expert at writing precise, unambiguous text instructions \
for another vision-language model ("the Critic") that must decide whether {robot_desc} \
has completed a task in a given video.

The Critic receives:
* A short sequence of RGB frames (a sparsely sampled video) from a single episode, \
ordered in time from the start to the current state (roughly 5-10 frames, every Nth frame).
* Your instruction text.

The Critic outputs task completion score as a single, binary character: "1" if the task \
is completed in the last frame; "0" otherwise. Different formatting is not allowed.

Your goal is to rewrite the Critic's instruction so that its decisions align with the \
binary ground-truth labels of success/no success.

Follow these principles at all times:

* Define success strictly by clear visual evidence in the frames of the sequence.
* Assume the video is sparsely sampled: avoid criteria that depend on seeing every \
moment of motion or exact trajectories.
* State the task goal succinctly, then specify a minimal checklist of visual cues \
required for success.
* Include explicit failure/ambiguity rules.
* Specify what to ignore.
* When needed, explicitly say how to compare frames.
* Use imperative voice, and refer to objects as they appear visually.
* Format your response exactly as follows without other additions or changes in formatting:
Reasoning: <3-5 sentences about the ambiguities or mistakes of the current prompt that \
explain the failure cases.>
Final Instruction: <updated and final instruction text>"""

# utils/prompts.py: CRITIC_TEMPLATE (the Critic's system prompt)
CRITIC_TEMPLATE = """\
You are an expert roboticist tasked to decide whether {robot_desc} has completed a \
given task using a short video and a task instruction.

Output format:
Return a single character with no extra text:
"1" if the task is completed in this frame;
"0" otherwise.
Do not explain your answer."""

# utils/prompts.py: _CRITIC_USER (wraps the instruction for the Critic; follows the frames)
CRITIC_USER = (
    "Here is a sequence of frames showing a robot policy attempting to solve a task. "
    "I need your help determining whether the policy is successful.\n\n"
    "Instruction: {instruction}\n"
    "Output EXACTLY a single character, either 0 or 1, to denote task completion. "
    "Use 1 if the task is completed; 0 otherwise. Use no other symbols or formatting."
)

# utils/prompts.py: _REFINE_INTRO (the opening paragraph of the Meta-Critic's user message)
REFINE_INTRO = (
    "Rewrite the instruction that will be given to a separate AI model (the Critic). "
    "The Critic receives a short sequence of RGB frames from a single episode and must "
    "decide whether {robot_desc} has completed the task{in_final_frame}. "
    "Your goal is to modify the instruction so that the Critic's binary decisions "
    "(1 = success, 0 = not successful) match the ground-truth labels as closely as "
    "possible. \n\n"
    "As a reference, you are given a demonstration of a successful task execution: "
    "a sequence of frames from a single episode, each followed by a binary ground-truth "
    "label indicating whether the task is already completed in that particular frame. "
    "Use this reference, together with the performance summary{and_failure_cases}, "
    "to refine the instruction."
)

# utils/critic.py: refine_prompt (the text blocks of the Meta-Critic's user message, in order)
REFERENCE_DEMO_HEADER = (
    "Ground-truth reference demonstration (each is an image followed by its ground-truth labels):"
)
CURRENT_INSTRUCTION = "Current Critic instruction:\n{instruction}"
PERFORMANCE_HEADER = (
    "Performance summary of the current Critic instruction over evaluation episodes:\n"
)
PERFORMANCE_LINES = (
    "True Positive Rate {tpr:.1f}%",
    "True Negative Rate {tnr:.1f}%",
    "False Positive Rate {fpr:.1f}%",
    "False Negative Rate {fnr:.1f}%",
)
FAILURES_HEADER = "Here are exemplar videos which the Critic judged incorrectly:"
FAILURE_OUTPUT = "Incorrect Critic output: {output}"
FINAL_REQUEST = (
    "First provide the reasoning (3-5 sentences), then provide the "
    "instruction - both exactly as required by the output format."
)

# vlms/vlm_utils.py: EXPLORATION, the sampling of prompt_strategy "explore" (the default
# --prompt_strategy of demo2reward.py) used for every Meta-Critic call
META_CRITIC_SAMPLING: dict[str, Any] = {
    "max_new_tokens": 1000,
    "do_sample": True,
    "temperature": 1.3,
    "top_p": 0.97,
    "top_k": 50,
}

# utils/critic.py: eval_single (greedy, 5 new tokens)
CRITIC_SAMPLING: dict[str, Any] = {
    "max_new_tokens": 5,
    "do_sample": False,
    "top_p": 1.0,
    "top_k": 0,
    "temperature": 0,
}

FINAL_INSTRUCTION = "Final Instruction:"
TASK_COMPLETION = "Task completion:"


def robot_description(real_robot: bool = False) -> str:
    """``"a robot"`` or ``"a simulated robot"`` (utils/prompts.py: build_prompts)."""
    return "a robot" if real_robot else "a simulated robot"


def generic_template(real_robot: bool = False) -> str:
    """The starting (un-refined) instruction as a template with ``{task}``
    (utils/prompts.py: build_generic_prompt, called with ``task_instruction="{task}"``):
    "this simulated robot" by default, "this robot" with ``real_robot`` (the reference's
    ``--real_robot``)."""
    # utils/prompts.py: build_generic_prompt
    robot_noun = "this robot" if real_robot else "this simulated robot"
    return (
        f"Evaluate the behavior of {robot_noun}. The robot was instructed with the task: {{task}}."
    )


def meta_critic_system_prompt(real_robot: bool = False) -> str:
    """The Meta-Critic's system prompt (utils/prompts.py: build_prompts)."""
    return META_CRITIC_TEMPLATE.format(robot_desc=robot_description(real_robot))


def critic_system_prompt(real_robot: bool = False) -> str:
    """The Critic's system prompt (utils/prompts.py: build_prompts)."""
    return CRITIC_TEMPLATE.format(robot_desc=robot_description(real_robot))


def refine_intro(real_robot: bool = False) -> str:
    """The Meta-Critic's opening paragraph (utils/prompts.py: build_refine_intro)."""
    return REFINE_INTRO.format(
        robot_desc=robot_description(real_robot),
        in_final_frame=" in the final frame of that sequence",
        and_failure_cases=" and failure cases",
    )


def extract_answer_after_substring(text: str, substring: str = FINAL_INSTRUCTION) -> str:
    """The reference parse (vlms/vlm_utils.py: extract_answer_after_substring), made lenient.

    As the reference: the text after the LAST occurrence of ``substring`` (in case the prompt
    is echoed), over several lines, stripped; when ``substring`` is absent, the first
    non-empty line (the reference neither retries nor raises). Departures: the marker matches
    regardless of case and of the whitespace around/inside it (``final  instruction :``),
    markdown emphasis around the marker (``**Final Instruction:**``) is dropped, and one
    pair of quotes (or backticks) around the whole answer is stripped.
    """
    s = text.strip()
    words = substring.rstrip(":").split()
    pattern = r"\**\s*" + r"\s+".join(re.escape(w) for w in words) + r"\s*\**\s*:\s*\**"
    matches = list(re.finditer(pattern, s, flags=re.IGNORECASE))
    if not matches:
        first = next((ln for ln in s.splitlines() if ln.strip()), "")
        return _unquote(first.strip())
    return _unquote(s[matches[-1].end() :].strip())


_QUOTES = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019"}


def _unquote(text: str) -> str:
    """``text`` without one pair of enclosing quotes (or code backticks)."""
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        return text[3:-3].strip()
    if len(text) >= 2 and _QUOTES.get(text[0]) == text[-1]:
        return text[1:-1].strip()
    return text


def parse_final_instruction(text: str) -> str:
    """The Meta-Critic's new instruction: the text after ``Final Instruction:``."""
    return extract_answer_after_substring(text, FINAL_INSTRUCTION)


def parse_binary(text: str) -> int:
    """The Critic's decision (utils/critic.py: _parse_binary + the ``int(...)`` of _eval_split).

    1 or 0 when the stripped answer is exactly that one character, else -1 (invalid; counted
    wrong for positives and negatives alike, as in the reference, where ``-1`` equals neither
    label). Departure: a one-character non-digit answer ("a") makes the reference raise in
    ``int(...)``; here it is -1 like every other invalid answer (a digit other than 0/1 too).
    """
    stripped = text.strip()
    if stripped in ("0", "1"):
        return int(stripped)
    return -1


def parse_critic_output(text: str) -> str:
    """The Critic output shown with a failure clip (utils/critic.py: _parse_critic_output)."""
    return extract_answer_after_substring(text, TASK_COMPLETION)
