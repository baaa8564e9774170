"""Demo2Reward as the reference (cgumbsch/Demo2Reward) defines it: the multimodal Meta-Critic,
the reference Critic and its binary parse, the loop's defaults, and the phrase-bank ablation.

Models are tiny random LLaVAs built offline (the ``tiny_llava`` fixture), loaded through the
real transformers code path; their answers are gibberish, so the tests check prompts,
sampling settings, parsing and the loop's bookkeeping, not the quality of instructions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from embodied.errors import ConfigError
from embodied.rewards import load_judge
from embodied.rewards.calibration import rates
from embodied.rewards.demo2reward import (
    DEFAULT_TEMPLATE,
    PROPOSERS,
    Demo2RewardConfig,
    DemonstrationSet,
    LabelledDemonstration,
    Misclassified,
    PhraseBankAblation,
    ProposalContext,
    ReferenceMetaCritic,
    default_proposer,
    optimize_instruction,
    parse_binary,
    parse_final_instruction,
    save_demonstrations,
)
from embodied.rewards.demo2reward import proposers as phrase_bank
from embodied.rewards.demo2reward.critic import CalibratedCritic, ReferenceCritic
from embodied.rewards.demo2reward.prompts import (
    CRITIC_SAMPLING,
    CRITIC_USER,
    META_CRITIC_SAMPLING,
    critic_system_prompt,
    meta_critic_system_prompt,
    refine_intro,
)

TASK = "reach the red cube"


def _demo(n: int, first_success: int, base: int = 0, task: str = TASK) -> LabelledDemonstration:
    """Frame i is filled with the value base + i (so an image tells which frame it is)."""
    frames = np.stack([np.full((16, 16, 3), base + i, dtype=np.uint8) for i in range(n)])
    labels = np.arange(n) >= first_success if first_success >= 0 else np.zeros(n, bool)
    return LabelledDemonstration(frames, labels, task)


def _ctx(
    demonstrations: list[LabelledDemonstration],
    misclassified: list[Misclassified] | None = None,
    seed: int = 0,
) -> ProposalContext:
    return ProposalContext(
        DEFAULT_TEMPLATE,
        rates([True, True, False, False], [True, False, False, True]),
        50.0,
        misclassified or [],
        [TASK],
        1,
        np.random.default_rng(seed),
        set(),
        demonstrations,
    )


@pytest.fixture(scope="module")
def critic(tiny_llava: Path) -> ReferenceCritic:
    judge = load_judge(f"critic:{tiny_llava}", device="cpu")
    assert isinstance(judge, ReferenceCritic)
    return judge


@pytest.fixture(scope="module")
def metacritic(critic: ReferenceCritic) -> ReferenceMetaCritic:
    proposer = default_proposer(critic)  # single-model mode: the Critic's weights
    assert isinstance(proposer, ReferenceMetaCritic) and proposer.model is critic.model
    return proposer


class _Recorder:
    """Wraps ``model.generate``: records its keyword arguments, then generates."""

    def __init__(self, model: Any) -> None:
        self.model, self.original = model, model.generate
        self.calls: list[dict[str, Any]] = []

    def __enter__(self) -> list[dict[str, Any]]:
        def generate(**kw: Any) -> Any:
            self.calls.append(kw)
            return self.original(**kw)

        self.model.generate = generate
        return self.calls

    def __exit__(self, *exc: object) -> None:
        del self.model.generate  # back to the class method


# --- the Meta-Critic's prompt ---------------------------------------------------------------


def test_meta_critic_prompt_shows_labelled_reference_frames_and_failure_clips(
    metacritic: ReferenceMetaCritic,
) -> None:
    failed = _demo(10, -1, base=100)  # not successful: never the reference
    ref = _demo(13, 7, base=10)
    failures = [
        Misclassified(0, step, False, 0.9, TASK, f"out{step}", failed.frames, 4)
        for step in (2, 4, 6, 8, 9, 3, 5)  # 7 given, the first 5 shown
    ]
    messages, idx = metacritic.messages(_ctx([failed, ref], failures), offset=2)
    assert idx == [2, 5, 8, 11]  # every third frame from the offset
    system, user = messages
    assert system["role"] == "system"
    assert system["content"] == [{"type": "text", "text": meta_critic_system_prompt()}]
    content = user["content"]
    assert content[0]["text"] == refine_intro()
    assert content[1]["text"].startswith("Ground-truth reference demonstration")
    # image, label, image, label ... of frames 2, 5, 8, 11 of the SUCCESSFUL demonstration
    ref_part = content[2 : 2 + 2 * len(idx)]
    shown = [int(np.asarray(e["image"])[0, 0, 0]) for e in ref_part[0::2]]
    assert shown == [10 + i for i in idx]
    assert [e["text"] for e in ref_part[1::2]] == ["0", "0", "1", "1"]  # success from frame 7
    texts = [e["text"] for e in content if e["type"] == "text"]
    assert f"Current Critic instruction:\n{DEFAULT_TEMPLATE.format(task=TASK)}" in texts
    perf = next(t for t in texts if t.startswith("Performance summary"))
    assert "True Positive Rate 50.0%" in perf and "False Positive Rate 50.0%" in perf
    # failure clips: the reference's samples (up to 4 earlier frames + current; frame 2 has
    # 3 earlier) as images, then the Critic's output
    start = texts.index("Here are exemplar videos which the Critic judged incorrectly:")
    assert [t for t in texts[start + 1 : -1]] == [
        f"Incorrect Critic output: out{s}" for s in (2, 4, 6, 8, 9)
    ]
    fail_images = [e for e in content[2 + 2 * len(idx) :] if e["type"] == "image"]
    shown_fail = [int(np.asarray(e["image"])[0, 0, 0]) - 100 for e in fail_images]
    assert shown_fail == [
        *[0, 0, 1, 2],
        *[0, 1, 2, 3, 4],
        *[0, 2, 3, 4, 6],
        *[0, 2, 4, 6, 8],
        *[0, 2, 4, 7, 9],  # round(4.5) == 4, round(6.75) == 7
    ]
    assert texts[-1].startswith("First provide the reasoning (3-5 sentences)")


def test_reference_offset_is_drawn_from_zero_to_nth_frame_inclusive(
    metacritic: ReferenceMetaCritic,
) -> None:
    ref = _demo(12, 6)
    firsts = {metacritic.messages(_ctx([ref], seed=s))[1][0] for s in range(40)}
    assert firsts == {0, 1, 2, 3}  # random.randint(0, 3) includes 3


def test_meta_critic_samples_with_the_reference_settings(
    metacritic: ReferenceMetaCritic,
) -> None:
    ref = _demo(9, 4)
    failures = [Misclassified(0, 3, False, 0.9, TASK, "1", ref.frames, 4)]
    with _Recorder(metacritic.model) as calls:
        template = metacritic.propose(_ctx([ref, ref, ref], failures))
    assert len(calls) == 1
    kw = calls[0]
    for key, value in {
        "temperature": 1.3,
        "top_p": 0.97,
        "top_k": 50,
        "max_new_tokens": 1000,
        "do_sample": True,
    }.items():
        assert kw[key] == value, key
    assert META_CRITIC_SAMPLING["max_new_tokens"] == 1000
    # every image reaches the model: the reference frames from the drawn offset + 5 frames
    offset = int(np.random.default_rng(0).integers(0, 4))  # ctx.rng's first draw
    assert kw["pixel_values"].shape[0] == len(range(9)[offset::3]) + 5
    assert "{task}" in template


def test_propose_parses_final_instruction_and_restores_the_task(
    metacritic: ReferenceMetaCritic, monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = (
        "Reasoning: The instruction was vague. It accepted unfinished attempts.\n"
        'Final Instruction: "Check the last frame: the robot must reach the red cube. '
        'Answer 0 if unsure."'
    )
    monkeypatch.setattr(metacritic, "generate", lambda messages, seed: reply)
    template = metacritic.propose(_ctx([_demo(9, 4)]))
    assert template == "Check the last frame: the robot must {task}. Answer 0 if unsure."


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Reasoning: r.\nFinal Instruction: Do it.", "Do it."),
        ("Reasoning: r.\nFinal Instruction:\nLine one.\nLine two.", "Line one.\nLine two."),
        ('Reasoning: r.\nFinal Instruction: "Quoted text."', "Quoted text."),
        ("Reasoning: r.\nfinal  instruction :  spaced and lower", "spaced and lower"),
        ("Reasoning: r.\n**Final Instruction:** bold marker", "bold marker"),
        (
            "Final Instruction: echoed\nReasoning: r\nFinal Instruction: the last one",
            "the last one",
        ),
        ("\n\n  No marker here.\nSecond line.", "No marker here."),  # reference fallback
        ("", ""),
    ],
)
def test_final_instruction_parsing(reply: str, expected: str) -> None:
    assert parse_final_instruction(reply) == expected


@pytest.mark.parametrize(
    ("answer", "value"),
    [("1", 1), ("0", 0), (" 1\n", 1), ("1.", -1), ("yes", -1), ("a", -1), ("2", -1), ("", -1)],
)
def test_critic_binary_parse(answer: str, value: int) -> None:
    assert parse_binary(answer) == value


# --- the Critic -----------------------------------------------------------------------------


def test_reference_critic_prompt_sampling_and_binary_answers(critic: ReferenceCritic) -> None:
    text = critic.prompt_text(TASK)
    assert critic_system_prompt() in text and "a simulated robot" in text
    assert CRITIC_USER.format(instruction=TASK) in text
    assert text.count("<image>") == critic.n_frames
    clips = [_demo(5, 2, base=b).frames for b in (0, 50, 120)]
    with _Recorder(critic.model) as calls:
        values, outputs = critic.critique(clips, TASK)
    assert calls and all({k: c[k] for k in CRITIC_SAMPLING} == CRITIC_SAMPLING for c in calls)
    assert CRITIC_SAMPLING["max_new_tokens"] == 5 and CRITIC_SAMPLING["do_sample"] is False
    assert len(values) == len(outputs) == 3
    assert all(np.isnan(v) or v in (0.0, 1.0) for v in values)
    scores = critic.score_batch(clips, TASK)
    np.testing.assert_array_equal(scores, np.where(values == 1.0, 1.0, 0.0))


def test_reference_critic_sees_short_first_clips_as_they_are(critic: ReferenceCritic) -> None:
    """The reference shows its first samples of an episode with 2-4 frames; so does the
    Critic (longer clips are resampled to n_frames as before)."""
    demo = _demo(12, 6)
    clips = demo.sample_clips(4, [0, 1, 2, 3, 11])
    assert [len(c) for c in clips] == [2, 3, 4, 5, 5]
    checked, _ = critic.prepare(clips, TASK)
    assert [len(c) for c in checked] == [2, 3, 4, 5, 5]
    assert [len(c) for c in critic.prepare([demo.frames], TASK)[0]] == [critic.n_frames]
    assert critic.prompt_text(TASK, 2).count("<image>") == 2
    with _Recorder(critic.model) as calls:
        values, outputs = critic.critique(clips, TASK)
    assert len(values) == len(outputs) == 5
    assert sum(c["pixel_values"].shape[0] for c in calls) == 2 + 3 + 4 + 5 + 5
    ev = DemonstrationSet([demo, _demo(12, 5), _demo(12, 8)], stride=4).evaluate(
        critic, DEFAULT_TEMPLATE
    )
    assert len(ev.probs) == 9


def test_invalid_critic_answers_count_wrong_for_both_labels() -> None:
    class Stub:
        threshold = 0.5

        def critique(self, clips: Any, text: str) -> tuple[np.ndarray, list[str]]:
            n = len(clips)
            values = np.full(n, np.nan)
            values[: n // 2] = 0.0  # the first half answers "0", the rest is gibberish
            return values, ["0"] * (n // 2) + ["maybe"] * (n - n // 2)

    demos = [_demo(8, 4), _demo(8, 4), _demo(8, 4)]
    ev = DemonstrationSet(demos).evaluate(Stub(), DEFAULT_TEMPLATE)  # type: ignore[arg-type]
    # frames 0-3 negative and answered "0": TN; frames 4-7 positive, invalid: FN
    assert (ev.rates.tnr, ev.rates.tpr) == (100.0, 0.0)
    assert ev.to_dict()["invalid"] == 12
    assert {m.output for m in ev.misclassified} == {"maybe"}
    assert len(ev.misclassified) == 12  # all kept (the reference's failure_cases)

    class Flipped(Stub):
        def critique(self, clips: Any, text: str) -> tuple[np.ndarray, list[str]]:
            values, outputs = super().critique(clips, text)
            return values[::-1], outputs[::-1]

    ev = DemonstrationSet(demos).evaluate(Flipped(), DEFAULT_TEMPLATE)  # type: ignore[arg-type]
    # invalid answers on negatives are false positives (the reference's -1 != 0)
    assert (ev.rates.fpr, ev.rates.tpr) == (100.0, 0.0)


def test_calibrated_variant_is_separate_and_thresholded(tiny_llava: Path) -> None:
    judge = load_judge(f"critic-calibrated:{tiny_llava}", device="cpu")
    assert isinstance(judge, CalibratedCritic) and not isinstance(judge, ReferenceCritic)
    assert judge.name == "critic-calibrated" and not hasattr(judge, "critique")
    assert critic_system_prompt() in judge.prompt_text(TASK)
    clips = [_demo(5, 2, base=b).frames for b in (0, 60, 200)]
    scores = judge.score_batch(clips, TASK)
    assert ((scores > 0) & (scores < 1)).all()  # probabilities, not 1/0 answers
    demos = [_demo(8, 4), _demo(8, 4), _demo(8, 4)]
    ev = DemonstrationSet(demos).evaluate(judge, DEFAULT_TEMPLATE, threshold=0.5)
    decisions = ev.probs >= 0.5
    assert len(ev.misclassified) == int((decisions != ev.labels).sum())
    for m in ev.misclassified:  # the decision is the output shown to the Meta-Critic
        assert m.output == str(int(decisions[8 * m.demonstration + m.step]))


# --- the loop -------------------------------------------------------------------------------


def test_reference_defaults_and_budget() -> None:
    cfg = Demo2RewardConfig()
    assert (cfg.iterations, cfg.restarts, cfg.budget, cfg.max_misclassified) == (100, 5, None, 5)
    with pytest.raises(ConfigError, match="budget"):
        Demo2RewardConfig(budget=0)

    class Judge:
        threshold = 0.5

        def score_batch(self, clips: Any, text: str) -> np.ndarray:
            return np.full(len(clips), (len(text) % 7) / 7.0)

    demos = [_demo(8, 4), _demo(8, 4), _demo(8, 4)]
    cfg = Demo2RewardConfig(iterations=3, restarts=2, budget=4)
    result = optimize_instruction(Judge(), demos, PhraseBankAblation(), cfg)  # type: ignore[arg-type]
    assert len(result.history) == 1 + 4  # the budget cut the second repeat short
    assert [h["restart"] for h in result.history[1:]] == [0, 0, 0, 1]
    assert [r["restart"] for r in result.repeats] == [0, 1]
    assert result.proposer == "phrase-bank-ablation"


def test_loop_runs_two_iterations_with_the_tiny_vlm(
    critic: ReferenceCritic, metacritic: ReferenceMetaCritic
) -> None:
    demos = [_demo(12, 6, base=0), _demo(12, 5, base=40), _demo(12, 8, base=80)]
    shown: list[int] = []
    propose = metacritic.propose

    def spy(ctx: ProposalContext) -> str:
        shown.append(len(ctx.misclassified))
        assert ctx.demonstrations and all(m.clip is not None for m in ctx.misclassified)
        return propose(ctx)

    cfg = Demo2RewardConfig(iterations=2, restarts=1, stride=4)
    with _Recorder(metacritic.model) as calls:
        metacritic.propose = spy  # type: ignore[method-assign]
        try:
            result = optimize_instruction(critic, demos, metacritic, cfg)
        finally:
            del metacritic.propose
    sampled = [c for c in calls if c.get("do_sample")]
    assert len(sampled) == 2  # one Meta-Critic call per iteration
    assert len(result.history) == 3 and [h["iteration"] for h in result.history] == [0, 1, 2]
    assert all("{task}" in h["template"] for h in result.history)
    assert shown and all(n <= 5 for n in shown)
    assert len(result.repeats) == 1 and result.proposer == "metacritic"
    # without a proposer the loop uses the Meta-Critic on the Critic's own model
    with pytest.raises(ConfigError, match="Meta-Critic"):
        optimize_instruction(object(), demos, None, cfg)  # type: ignore[arg-type]


def test_cli_defaults_to_the_meta_critic(tmp_path: Path, tiny_llava: Path) -> None:
    from embodied.apps.cli import app

    save_demonstrations([_demo(12, 6), _demo(12, 5), _demo(12, 8)], tmp_path / "demos")
    base = ["lab", "reward", "optimize", "--demonstrations", str(tmp_path / "demos")]
    base += ["--iterations", "1", "--restarts", "1", "--stride", "4", "--device", "cpu"]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "none")])
    assert res.exit_code != 0
    assert "--proposer-model" in str(res.exception) + res.output
    res = CliRunner().invoke(
        app, [*base, "--out", str(tmp_path / "out"), "--proposer-model", str(tiny_llava)]
    )
    assert res.exit_code == 0, res.output
    saved = json.loads((tmp_path / "out" / "instruction.json").read_text())
    assert saved["proposer"] == "metacritic" and saved["judge"]["backend"] == "critic"
    assert len(saved["history"]) == 2


# --- the ablation ---------------------------------------------------------------------------

HINTS = re.compile(
    r"\b(hover\w*|touch\w*|above|below|near\w*|close\w*|far|approach\w*|target\w*|gripper|"
    r"colou?rs?|red|green|blue|wrong|blocked|obstacle\w*|cube\w*|reached|way)\b"
)


def test_phrase_bank_ablation_is_labelled_and_names_no_failure_kind() -> None:
    bank = [
        *phrase_bank.PARAPHRASES,
        *phrase_bank.STRICT_CLAUSES,
        *phrase_bank.LENIENT_CLAUSES,
        *phrase_bank.NEGATIONS,
    ]
    leaks = [p for p in bank if HINTS.search(p.lower())]
    assert not leaks, leaks
    assert PhraseBankAblation.name == "phrase-bank-ablation"
    assert "ABLATION" in (PhraseBankAblation.__doc__ or "")
    assert "phrase-bank-ablation" in PROPOSERS and "offline" not in PROPOSERS
    assert "metacritic" in PROPOSERS
    rng = np.random.default_rng(0)
    ctx = ProposalContext(
        DEFAULT_TEMPLATE, rates([True, True, False], [True, False, False]), 50.0, [], [TASK], 1, rng
    )
    for _ in range(30):
        assert not HINTS.search(PhraseBankAblation().propose(ctx).replace("{task}", "").lower())
