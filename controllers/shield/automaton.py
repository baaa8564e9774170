"""The LTL safety specification as a DFA, and its product with the abstract MDP.

* :func:`compile_spec` - an LTLf formula over the abstraction's atomic propositions to a
  :class:`DFA`: through ltlf2dfa (which calls the MONA binary) when both are installed, and
  always through a built-in two-state DFA for the plain safety case ``G phi`` with ``phi``
  propositional (``G !bad``, ``G !(bad1 | bad2)``), so the shield works without MONA.
* :class:`DFA` - letters are valuations of the propositions (bit ``i`` = proposition ``i``).
  Its *violating* states are those from which no accepting state can be reached: once there,
  every continuation of the trace violates the specification (a bad prefix was read).
* :class:`Product` - the product of the abstract MDP with the DFA: product state ``(s, q)``;
  entering abstract state ``s'`` moves the DFA by the label of ``s'``,
  ``(s, q) -a-> (s', delta(q, L(s')))``, and the first state reads its own label,
  ``(s0, delta(q0, L(s0)))``, as in Baier & Katoen's product construction. Product states
  whose DFA state is violating are the absorbing "bad" sink.

Propositional syntax (spec and ltlf2dfa's DOT guards): atoms ``[a-z][a-z0-9_]*``, ``true``,
``false``, ``!``/``~`` (not), ``&``, ``|``, ``->``, parentheses.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from embodied.errors import ConfigError

Backend = Literal["auto", "builtin", "ltlf2dfa"]
MAX_PROPOSITIONS = 12
"""Letters are all 2^P valuations; 12 propositions are 4096 letters per DFA state."""

MONA_FIX = (
    "install the shield extra (pip install -e '.[shield]') and the MONA binary "
    "(apt-get install mona), or write the spec as 'G <propositional formula>'"
)
_MONA_LOCK = threading.Lock()  # ltlf2dfa writes one fixed file (automa.mona) per call


# ---- propositional formulas ------------------------------------------------------------

_TOKEN = re.compile(r"\s*(->|[!~&|()]|[A-Za-z_][A-Za-z0-9_]*)")
Formula = tuple[Any, ...]


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConfigError(
                f"cannot read {text!r} at position {pos}: {text[pos:]!r}",
                fix="use atoms, true/false, !, ~, &, |, -> and parentheses",
            )
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


class _Parser:
    """Recursive descent: impl := or ['->' impl]; or := and {'|' and}; and := unary {'&' unary}."""

    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens, self.pos, self.text = tokens, 0, text

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise ConfigError(
                f"formula {self.text!r}: expected {expected or 'more input'}, got {tok!r}",
                fix="check the parentheses and operators",
            )
        self.pos += 1
        return tok

    def impl(self) -> Formula:
        left = self.disj()
        if self.peek() == "->":
            self.take()
            return ("|", ("!", left), self.impl())
        return left

    def disj(self) -> Formula:
        node = self.conj()
        while self.peek() == "|":
            self.take()
            node = ("|", node, self.conj())
        return node

    def conj(self) -> Formula:
        node = self.unary()
        while self.peek() == "&":
            self.take()
            node = ("&", node, self.unary())
        return node

    def unary(self) -> Formula:
        tok = self.take()
        if tok in ("!", "~"):
            return ("!", self.unary())
        if tok == "(":
            node = self.impl()
            self.take(")")
            return node
        if tok in ("true", "false"):
            return ("const", tok == "true")
        if re.fullmatch(r"[a-z][a-z0-9_]*", tok):
            return ("atom", tok)
        raise ConfigError(
            f"formula {self.text!r}: {tok!r} is not a proposition or operator here",
            fix="temporal operators (G, F, X, U, ...) need ltlf2dfa + MONA; " + MONA_FIX,
        )


def parse_propositional(text: str) -> Formula:
    """Parse a propositional formula (see the module docstring) into a small AST."""
    parser = _Parser(_tokenize(text), text)
    node = parser.impl()
    if parser.peek() is not None:
        raise ConfigError(f"formula {text!r}: unexpected {parser.peek()!r}")
    return node


def atoms_of(node: Formula) -> set[str]:
    """Atomic propositions named in a parsed formula."""
    if node[0] == "atom":
        return {node[1]}
    if node[0] == "const":
        return set()
    return set().union(*(atoms_of(child) for child in node[1:]))


def evaluate(node: Formula, valuation: Mapping[str, bool]) -> bool:
    """Truth of a parsed formula; atoms missing from ``valuation`` are false."""
    kind = node[0]
    if kind == "atom":
        return bool(valuation.get(node[1], False))
    if kind == "const":
        return bool(node[1])
    if kind == "!":
        return not evaluate(node[1], valuation)
    if kind == "&":
        return evaluate(node[1], valuation) and evaluate(node[2], valuation)
    return evaluate(node[1], valuation) or evaluate(node[2], valuation)


# ---- DFA -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DFA:
    """A complete DFA over valuations of ``propositions``.

    Args:
        propositions: Alphabet atoms; letter ``l`` makes proposition ``i`` true iff bit ``i``
            of ``l`` is set.
        transitions: (n_states, 2 ** len(propositions)) int array, ``delta(q, letter)``.
        initial: Initial state.
        accepting: Accepting states (finite-trace acceptance, LTLf).
    """

    propositions: tuple[str, ...]
    transitions: np.ndarray
    initial: int
    accepting: frozenset[int]

    def __post_init__(self) -> None:
        t = np.asarray(self.transitions, dtype=np.int64)
        object.__setattr__(self, "transitions", t)
        n_letters = 2 ** len(self.propositions)
        if t.ndim != 2 or t.shape[1] != n_letters or t.shape[0] < 1:
            raise ConfigError(f"DFA transitions have shape {t.shape}, expected (Q, {n_letters})")
        if t.min() < 0 or t.max() >= t.shape[0] or not 0 <= self.initial < t.shape[0]:
            raise ConfigError("DFA transitions or initial state point outside its states")

    @property
    def n_states(self) -> int:
        """Number of DFA states."""
        return int(self.transitions.shape[0])

    @property
    def violating(self) -> frozenset[int]:
        """States from which no accepting state is reachable (a bad prefix was read)."""
        alive = set(self.accepting)
        changed = True
        while changed:  # backward reachability of the accepting states
            changed = False
            for q in range(self.n_states):
                if q not in alive and any(int(n) in alive for n in self.transitions[q]):
                    alive.add(q)
                    changed = True
        return frozenset(set(range(self.n_states)) - alive)

    def letter(self, true: Iterable[str]) -> int:
        """The letter in which exactly the propositions ``true`` hold."""
        true_set = set(true)
        unknown = true_set - set(self.propositions)
        if unknown:
            raise ConfigError(
                f"unknown propositions {sorted(unknown)}; DFA has {self.propositions}"
            )
        return sum(1 << i for i, p in enumerate(self.propositions) if p in true_set)

    def step(self, state: int, letter: int) -> int:
        """``delta(state, letter)``."""
        return int(self.transitions[state, letter])

    def run(self, word: Iterable[Iterable[str]]) -> int:
        """State after reading ``word`` (one set of true propositions per position)."""
        q = self.initial
        for props in word:
            q = self.step(q, self.letter(props))
        return q

    def minimal(self) -> DFA:
        """The minimal equivalent DFA, states numbered in breadth-first order from the initial.

        Two DFAs accept the same language iff their ``minimal()`` forms are equal (same
        propositions order), which is how the tests compare ltlf2dfa with the built-in DFA.
        """
        # reachable part, breadth first in letter order
        order, seen = [self.initial], {self.initial}
        queue = deque(order)
        while queue:
            q = queue.popleft()
            for n in self.transitions[q]:
                if int(n) not in seen:
                    seen.add(int(n))
                    order.append(int(n))
                    queue.append(int(n))
        # Moore partition refinement, starting from accepting / non-accepting
        block = {q: int(q in self.accepting) for q in order}
        while True:
            signature = {
                q: (block[q], *(block[int(n)] for n in self.transitions[q])) for q in order
            }
            ids: dict[tuple[int, ...], int] = {}
            new = {q: ids.setdefault(signature[q], len(ids)) for q in order}
            if len(ids) == len(set(block.values())):
                break
            block = new
        # renumber blocks breadth first from the initial state's block
        number: dict[int, int] = {}
        queue = deque([self.initial])
        number[block[self.initial]] = 0
        rep = {block[self.initial]: self.initial}
        while queue:
            q = queue.popleft()
            for n in self.transitions[q]:
                b = block[int(n)]
                if b not in number:
                    number[b] = len(number)
                    rep[b] = int(n)
                    queue.append(int(n))
        table = np.zeros((len(number), self.transitions.shape[1]), dtype=np.int64)
        for b, i in number.items():
            table[i] = [number[block[int(n)]] for n in self.transitions[rep[b]]]
        accepting = frozenset(number[block[q]] for q in order if q in self.accepting)
        return DFA(self.propositions, table, 0, accepting)

    def equals(self, other: DFA) -> bool:
        """Same language over the same propositions (compares minimal forms exactly)."""
        a, b = self.minimal(), other.minimal()
        return (
            a.propositions == b.propositions
            and a.transitions.shape == b.transitions.shape
            and bool((a.transitions == b.transitions).all())
            and a.accepting == b.accepting
        )


def _valuations(propositions: Sequence[str]) -> list[dict[str, bool]]:
    return [
        {p: bool(letter >> i & 1) for i, p in enumerate(propositions)}
        for letter in range(2 ** len(propositions))
    ]


def _check_alphabet(spec: str, atoms: set[str], propositions: Sequence[str]) -> None:
    if len(propositions) > MAX_PROPOSITIONS:
        raise ConfigError(
            f"{len(propositions)} propositions exceed the limit {MAX_PROPOSITIONS}",
            fix="keep only the propositions the specification uses",
        )
    unknown = atoms - set(propositions)
    if unknown:
        raise ConfigError(
            f"spec {spec!r} names propositions {sorted(unknown)} that the abstraction does not "
            f"define (it has {list(propositions)})",
            fix="add them to the abstraction's propositions or fix the spec",
        )


def builtin_safety_dfa(spec: str, propositions: Sequence[str]) -> DFA:
    """Two-state DFA of ``G phi`` (``phi`` propositional): state 0 while ``phi`` held, 1 after.

    Args:
        spec: ``"G" <one unary formula>``, e.g. ``G !bad``, ``G(!bad)``, ``G !(bad1 | bad2)``;
            a binary operator after the operand needs parentheses (``G (!a & !b)``), since
            ``G !a & !b`` means ``(G !a) & !b`` in LTL.
        propositions: The abstraction's atomic propositions (the DFA alphabet).

    Raises:
        ConfigError: the spec is not of that form (the fix names the ltlf2dfa route).
    """
    tokens = _tokenize(spec)
    if not tokens or tokens[0] != "G":
        raise ConfigError(
            f"built-in automaton handles 'G <propositional formula>', got {spec!r}",
            fix=MONA_FIX,
        )
    parser = _Parser(tokens[1:], spec)
    phi = parser.unary()
    if parser.peek() is not None:
        raise ConfigError(
            f"spec {spec!r}: {parser.peek()!r} after the operand of G",
            fix="parenthesise the operand, e.g. 'G (!a & !b)', or use ltlf2dfa: " + MONA_FIX,
        )
    _check_alphabet(spec, atoms_of(phi), propositions)
    holds = [evaluate(phi, v) for v in _valuations(propositions)]
    table = np.array([[0 if h else 1 for h in holds], [1] * len(holds)], dtype=np.int64)
    return DFA(tuple(propositions), table, 0, frozenset({0}))


def mona_available() -> bool:
    """True when ltlf2dfa is importable and the ``mona`` binary is on ``PATH``."""
    try:
        import ltlf2dfa  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mona") is not None


def parse_mona_dot(dot: str, propositions: Sequence[str]) -> DFA:
    """ltlf2dfa's DOT output to a :class:`DFA` over ``propositions``.

    ltlf2dfa numbers MONA's states from 1 (``init -> 1``), lists accepting states on the
    ``doublecircle`` line (its ``circle`` line is not reliable and is ignored) and labels
    edges with propositional guards; a missing (state, letter) pair goes to an added
    non-accepting sink so the DFA is complete.
    """
    init = re.search(r"init\s*->\s*(\d+)\s*;", dot)
    if init is None:
        raise ConfigError("ltlf2dfa DOT has no 'init -> N' edge", fix=MONA_FIX)
    acc_line = re.search(r"doublecircle\s*\]\s*;([^\n]*)", dot)
    accepting_raw = {int(x) for x in re.findall(r"\d+", acc_line.group(1))} if acc_line else set()
    edges = [
        (int(a), int(b), g)
        for a, b, g in re.findall(r"^\s*(\d+)\s*->\s*(\d+)\s*\[label=\"([^\"]*)\"\]", dot, re.M)
    ]
    names = sorted({int(init.group(1))} | {a for a, _, _ in edges} | {b for _, b, _ in edges})
    index = {name: i for i, name in enumerate(names)}
    sink = len(names)
    valuations = _valuations(propositions)
    table = np.full((sink + 1, len(valuations)), sink, dtype=np.int64)
    atoms: set[str] = set()
    for a, b, guard in edges:
        node = parse_propositional(guard)
        atoms |= atoms_of(node)
        for letter, v in enumerate(valuations):
            if evaluate(node, v):
                table[index[a], letter] = index[b]
    _check_alphabet(dot, atoms, propositions)
    accepting = frozenset(index[q] for q in accepting_raw if q in index)
    return DFA(tuple(propositions), table, index[int(init.group(1))], accepting)


def ltlf2dfa_dfa(spec: str, propositions: Sequence[str]) -> DFA:
    """Compile an LTLf formula with ltlf2dfa + MONA.

    Raises:
        ConfigError: ltlf2dfa or MONA missing, or the formula does not parse.
    """
    if not mona_available():
        raise ConfigError(f"spec {spec!r} needs ltlf2dfa and the mona binary", fix=MONA_FIX)
    from ltlf2dfa.parser.ltlf import LTLfParser

    try:
        formula = LTLfParser()(spec)
    except Exception as exc:  # lark raises its own exception types
        raise ConfigError(f"ltlf2dfa cannot parse spec {spec!r}: {exc}") from exc
    labels = {str(x).lower() for x in formula.find_labels()}
    _check_alphabet(spec, labels, propositions)
    with _MONA_LOCK:
        dot = formula.to_dfa()
    if not isinstance(dot, str) or "digraph" not in dot:
        raise ConfigError(f"MONA produced no automaton for spec {spec!r}", fix=MONA_FIX)
    return parse_mona_dot(dot, propositions)


def compile_spec(spec: str, propositions: Sequence[str], backend: Backend = "auto") -> DFA:
    """The DFA of LTLf safety spec ``spec`` over ``propositions``.

    Args:
        spec: LTLf formula, e.g. ``"G !bad"`` or ``"G(near -> X !bad)"``.
        propositions: The abstraction's atomic propositions, in its order.
        backend: ``"ltlf2dfa"`` (ltlf2dfa + MONA), ``"builtin"`` (``G phi`` only) or
            ``"auto"`` (ltlf2dfa when available, else the built-in one).

    Raises:
        ConfigError: unknown backend, or a spec the chosen backend cannot compile.
    """
    if backend == "builtin":
        return builtin_safety_dfa(spec, propositions)
    if backend == "ltlf2dfa" or (backend == "auto" and mona_available()):
        return ltlf2dfa_dfa(spec, propositions)
    if backend == "auto":
        return builtin_safety_dfa(spec, propositions)
    raise ConfigError(
        f"unknown automaton backend {backend!r}", fix="use 'auto', 'builtin' or 'ltlf2dfa'"
    )


# ---- product ---------------------------------------------------------------------------


class Product:
    """The product of an abstract MDP (its labels) with a :class:`DFA`.

    Product state ``(s, q)`` has flat index ``s * n_dfa + q``.

    Args:
        label_matrix: (S, P) truth of each proposition in each abstract state, columns in
            ``dfa.propositions`` order (``Abstraction.label_matrix``).
        dfa: The specification automaton.
    """

    def __init__(self, label_matrix: np.ndarray, dfa: DFA) -> None:
        labels = np.asarray(label_matrix, dtype=bool)
        if labels.ndim != 2 or labels.shape[1] != len(dfa.propositions):
            raise ConfigError(
                f"label matrix has shape {labels.shape}; the DFA has "
                f"{len(dfa.propositions)} propositions {dfa.propositions}"
            )
        self.dfa = dfa
        self.n_states = int(labels.shape[0])
        self.n_dfa = dfa.n_states
        weights = 1 << np.arange(labels.shape[1], dtype=np.int64)
        self.letters = (labels.astype(np.int64) * weights).sum(axis=1)  # (S,)
        # next_q[q, s']: DFA state after entering s' from DFA state q
        self.next_q = dfa.transitions[:, self.letters]
        self.bad_q = np.zeros(self.n_dfa, dtype=bool)
        self.bad_q[list(dfa.violating)] = True

    @property
    def size(self) -> int:
        """Number of product states ``S * Q``."""
        return self.n_states * self.n_dfa

    def index(self, state: int, q: int) -> int:
        """Flat index of product state ``(state, q)``."""
        return int(state) * self.n_dfa + int(q)

    def initial(self, state: int) -> tuple[int, int]:
        """Product state when the trace starts in abstract state ``state``."""
        return int(state), int(self.next_q[self.dfa.initial, state])

    def successor(self, q: int, next_state: int) -> tuple[int, int]:
        """Product state after entering ``next_state`` with the DFA in ``q``."""
        return int(next_state), int(self.next_q[q, next_state])

    def violating(self, state: int, q: int) -> bool:
        """True when ``(state, q)`` is in the bad sink (the specification is violated)."""
        del state  # the DFA state alone decides; kept for a readable call site
        return bool(self.bad_q[q])

    def occupiable(self) -> np.ndarray:
        """(S, Q) mask of product states some trace can be in.

        ``(s, q)`` is occupiable when ``q`` is the DFA state after reading ``s``'s label from
        the initial DFA state or from any DFA state; the others (e.g. ``s`` labelled bad with
        a non-violating ``q`` under ``G !bad``) never occur and are left out of statistics.
        """
        mask = np.zeros((self.n_states, self.n_dfa), dtype=bool)
        s_idx = np.arange(self.n_states)
        for q in range(self.n_dfa):
            mask[s_idx, self.next_q[q]] = True
        return mask

    def reachable(
        self, support: np.ndarray, initial_states: Iterable[int]
    ) -> tuple[list[tuple[int, int]], list[tuple[tuple[int, int], int, tuple[int, int]]]]:
        """Product states and transitions reachable from ``initial_states``.

        Violating product states are absorbing sinks: they are listed but not expanded.

        Args:
            support: (S, A, S) bool, which abstract transitions are possible.
            initial_states: Abstract states the trace may start in.

        Returns:
            (states in breadth-first order, transitions ``((s, q), a, (s', q'))``).
        """
        sup = np.asarray(support, dtype=bool)
        if sup.ndim != 3 or sup.shape[0] != self.n_states or sup.shape[2] != self.n_states:
            raise ConfigError(f"support has shape {sup.shape}, expected (S, A, S)")
        start = [self.initial(s) for s in initial_states]
        seen = set(start)
        order = list(dict.fromkeys(start))
        queue = deque(order)
        transitions: list[tuple[tuple[int, int], int, tuple[int, int]]] = []
        while queue:
            s, q = queue.popleft()
            if self.bad_q[q]:
                continue
            for a in range(sup.shape[1]):
                for s2 in np.flatnonzero(sup[s, a]):
                    nxt = self.successor(q, int(s2))
                    transitions.append(((s, q), a, nxt))
                    if nxt not in seen:
                        seen.add(nxt)
                        order.append(nxt)
                        queue.append(nxt)
        return order, transitions
