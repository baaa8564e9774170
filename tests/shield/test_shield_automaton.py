"""The safety spec as a DFA (ltlf2dfa + MONA vs built in) and the product with the MDP."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from controllers.shield.automaton import (
    DFA,
    Product,
    builtin_safety_dfa,
    compile_spec,
    ltlf2dfa_dfa,
    parse_mona_dot,
)
from embodied.errors import ConfigError
from tests.conftest import require


def _need_mona() -> None:
    require("ltlf2dfa")
    if shutil.which("mona") is None:  # under EMBODIED_REQUIRE_EXTRAS=1 this skip fails
        pytest.skip("the mona binary is missing (apt-get install mona)")


@pytest.mark.parametrize(
    ("spec", "props"),
    [("G !bad", ["bad"]), ("G(!(bad1 | bad2))", ["bad1", "bad2"]), ("G !bad", ["bad", "other"])],
)
def test_ltlf2dfa_dfa_of_safety_spec_equals_the_builtin_one(spec: str, props: list[str]) -> None:
    _need_mona()
    mona = ltlf2dfa_dfa(spec, props)
    builtin = builtin_safety_dfa(spec, props)
    assert mona.equals(builtin)
    minimal = mona.minimal()
    assert minimal.n_states == 2 and minimal.accepting == frozenset({0})
    assert minimal.violating == frozenset({1})
    # reading a bad letter once violates forever; safe letters keep the initial state
    bad_letter = minimal.letter([props[0]])
    assert minimal.step(0, bad_letter) == 1 and minimal.step(0, 0) == 0
    assert compile_spec(spec, props, "auto").equals(builtin)


def test_ltlf2dfa_general_formula_marks_only_dead_states_violating() -> None:
    """G(a -> X b): after 'a' the DFA waits for 'b' (not accepting, not yet violated)."""
    _need_mona()
    dfa = ltlf2dfa_dfa("G(a -> X b)", ["a", "b"])
    q = dfa.run([{"a"}])
    assert q not in dfa.accepting and q not in dfa.violating
    assert dfa.run([{"a"}, {"b"}]) in dfa.accepting
    assert dfa.run([{"a"}, set()]) in dfa.violating


def test_mona_dot_parser_reads_guards_and_completes_the_automaton() -> None:
    dot = (
        "digraph MONA_DFA {\n node [shape = doublecircle]; 1;\n node [shape = circle]; 1;\n"
        ' init [shape = plaintext, label = ""];\n init -> 1;\n'
        ' 1 -> 1 [label="~a & ~b"];\n 1 -> 2 [label="a | b"];\n 2 -> 2 [label="true"];\n}'
    )
    dfa = parse_mona_dot(dot, ["a", "b"])
    assert dfa.equals(builtin_safety_dfa("G !(a | b)", ["a", "b"]))


def test_builtin_refuses_what_it_cannot_compile() -> None:
    with pytest.raises(ConfigError, match="fix"):
        builtin_safety_dfa("F bad", ["bad"])
    with pytest.raises(ConfigError, match="parenthesise"):
        builtin_safety_dfa("G !a & !b", ["a", "b"])  # means (G !a) & !b in LTL
    with pytest.raises(ConfigError, match="does not define"):
        builtin_safety_dfa("G !crash", ["bad"])
    with pytest.raises(ConfigError, match="backend"):
        compile_spec("G !bad", ["bad"], "spot")  # type: ignore[arg-type]


def test_product_of_a_tiny_mdp_with_a_three_state_dfa_counted_by_hand() -> None:
    """Spec "never bad right after warn" over labels s0 {}, s1 {warn}, s2 {bad}.

    DFA (letters: bit 0 warn, bit 1 bad): q0 normal, q1 just saw warn, q2 violated.
    Support: s0 -a0-> {s0, s1}, s0 -a1-> {s2}, s1 -a0-> {s0}, s1 -a1-> {s1, s2},
    s2 -a0-> {s0}, s2 -a1-> {s2}. From (s0, q0):
    (s0,q0) -a0-> (s0,q0), (s1,q1); -a1-> (s2,q0)          3 transitions
    (s1,q1) -a0-> (s0,q0); -a1-> (s1,q1), (s2,q2)          3
    (s2,q0) -a0-> (s0,q0); -a1-> (s2,q0)                   2
    (s2,q2) violating: absorbing, not expanded             0
    """
    # letter = warn + 2 * bad
    table = np.array(
        [
            [0, 1, 0, 1],  # q0: warn -> q1, else q0 (bad without warn before is fine)
            [0, 1, 2, 2],  # q1: bad -> q2, warn -> q1, else q0
            [2, 2, 2, 2],  # q2: violated forever
        ]
    )
    dfa = DFA(("warn", "bad"), table, 0, frozenset({0, 1}))
    labels = np.array([[False, False], [True, False], [False, True]])
    product = Product(labels, dfa)
    support = np.zeros((3, 2, 3), dtype=bool)
    for s, a, targets in [(0, 0, [0, 1]), (0, 1, [2]), (1, 0, [0]), (1, 1, [1, 2]), (2, 0, [0]),
                          (2, 1, [2])]:  # fmt: skip
        support[s, a, targets] = True
    states, transitions = product.reachable(support, [0])
    assert states == [(0, 0), (1, 1), (2, 0), (2, 2)]
    assert len(transitions) == 8
    assert ((1, 1), 1, (2, 2)) in transitions and ((0, 0), 1, (2, 0)) in transitions
    assert [product.violating(*x) for x in states] == [False, False, False, True]
    assert product.initial(1) == (1, 1)  # the first state reads its own label
    occupiable = product.occupiable()
    assert occupiable[2, 0] and occupiable[2, 2] and not occupiable[0, 1]
