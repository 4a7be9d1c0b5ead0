"""The sync period: how many blocks each replica trains between two merges (``sync_every``).

An explicit integer is the period of every round, as it always was. ``"auto"`` chooses it
from what the training measures, so that coordination stays a small share of the wall time
whatever a round costs (a few milliseconds through an actor, well under one through a direct
collective) and however cheap a block is:

- **What is measured.** Every round each replica passes, as the *info* of its all-reduce, the
  seconds it spent in ``partial_fit`` this round, the blocks it trained, and the overhead of
  its previous round (copying the global estimator and waiting in the all-reduce; the wait of
  the round in progress is not known until it ends). The all-reduce hands every replica every
  replica's info, in rank order, so all of them hold the same numbers and reach the same
  decision with :func:`choose_period`: no further message is needed, and the replicas' round
  ids and round counts stay in step.
- **The estimates.** ``block_s``: per round, the seconds per block of the slowest replica (the
  one the others wait for; replicas without blocks that round are left out), and the median
  over rounds. ``round_s``: per round, the *smallest* overhead over replicas (the last replica
  to arrive waits only for the collective itself: the merge and the messages, not for the
  others), and the median over rounds. Medians keep the first round's warm-up (first
  ``partial_fit`` allocations, the first connection to the actor) out of the estimate.
- **The formula.** A round costs ``p * block_s + round_s`` of wall time, ``round_s`` of it
  coordination, so the period is the smallest ``p`` with
  ``round_s / (p * block_s + round_s) <= TARGET``, that is
  ``p = ceil(round_s * (1 - TARGET) / (TARGET * block_s))``, at least 1, and at most
  ``max(1, (most_blocks - 1) // (MIN_ROUNDS - 1))`` (``most_blocks``: the most blocks of any
  replica in one epoch), the longest period that still leaves ``ceil(most_blocks / p) >=
  MIN_ROUNDS`` merges an epoch.
- **When.** The first ``PROBE_ROUNDS`` rounds of a training run with period 1 and are
  measured; the period chosen from them holds for the rest of the first epoch
  (``PROBE_ROUNDS <= MIN_ROUNDS``, so an epoch the probe covers whole has period 1 anyway).
  After every
  epoch it is chosen again from that epoch's rounds and holds for the next one (so a change
  of load is followed, at most once per epoch). The epoch boundary, the validation score and
  early stopping stay at the end of each epoch; a replica with fewer blocks contributes no
  rows to the rounds it has nothing for, so every replica performs the same number of reduces.

The bound ``MIN_ROUNDS`` was measured: holdout accuracy of ``train(..., sync_every=p,
n_replicas=2, client=False)`` against ``sync_every=1`` on the same data (holdout = the last
20 % of the rows; each seed a new data set, estimator seed and chunk order), the mean
difference in points and the worst seed's in brackets:

- the benchmark of this feature: 600,000 × 40 float64 training rows in 30,000-row chunks
  (``taskdml.datasets.make_classification``, 20 informative and 10 redundant features),
  ``SGDClassifier(loss="hinge", alpha=1e-5)``, 10 blocks a replica an epoch. 3 epochs,
  16 seeds: ``sync_every`` 2: +0.54 (-0.63), 3: -0.09 (-2.04), 5: +0.11 (-2.31), 10: +0.40
  (-3.39); 1 epoch, 8 seeds: +1.33, +0.73, +1.00, +0.67 on average. No loss on average even
  at one merge an epoch; single runs scatter by several points whatever the period (this
  SGD's noise), so linear SGD alone would need no bound.
- the same data at a fifth (120,000 rows in 6,000-row chunks, still 10 blocks a replica),
  ``MLPClassifier(hidden_layer_sizes=(32,))``, 4 seeds, 1 epoch: ``sync_every`` 2 (5 merges
  an epoch): -0.11 (-0.15), 3 (4 merges): -0.21 (-0.31), 5 (2 merges): -0.42 (-0.56), 10
  (1 merge): -0.89 (-1.07); after 3 epochs -0.03, -0.05, -0.08, -0.18. Replicas of a
  non-convex model drift apart between merges and the average loses what either learnt.

So every epoch keeps at least 4 merges (``MIN_ROUNDS``): the MLP's loss stays within 0.5
points (0.31 at worst), and linear models give nothing up. On the benchmark with rounds
through the actor (about 4 ms against 7 ms a block) the bound binds: the formula asks for 11
blocks a round, the bound allows 3, and coordination falls from about 36 % of the wall time
to 16 %; with a collective of 0.5 ms (1 ms) the formula's own 2 (3) holds: 3.4 % (4.5 %).

"auto" is not deterministic: the period depends on timings. A result is reproducible with
its recorded periods (``history[i]["sync_every"]``) passed as an explicit integer per epoch.
"""

import math
import statistics

AUTO = "auto"
"""The value of ``sync_every`` that chooses the period from measurements."""

TARGET = 0.05
"""The largest share of a round's wall time that coordination may take."""

MIN_ROUNDS = 4
"""The fewest merges in an epoch that ``"auto"`` keeps (when there are that many blocks)."""

PROBE_ROUNDS = 4
"""The rounds of period 1 measured at the start of a training before ``"auto"`` decides."""


def check_sync_every(value, owner=None):
    """*value* if it is a valid ``sync_every``, else a ValueError that says what is allowed.

    Parameters
    ----------
    value : object
        An integer >= 1 or ``"auto"``.
    owner : str, optional
        Who takes the parameter (a class name), for the message.

    Returns
    -------
    int or str
        *value* (an integer as a Python ``int``).

    Raises
    ------
    ValueError
        For anything else (including ``True``, ``2.0`` and ``"2"``).

    Examples
    --------
    >>> from taskdml.parallel.engine._period import check_sync_every
    >>> check_sync_every("auto"), check_sync_every(4)
    ('auto', 4)
    """
    from taskdml.parallel.engine._options import check

    check("train", {"sync_every": value}, owner)
    return value if isinstance(value, str) else int(value)


def choose_period(block_s, round_s, most_blocks, *, target=TARGET, min_rounds=MIN_ROUNDS):
    """The period ``"auto"`` chooses: the fewest blocks per round that keep coordination at
    most *target* of a round's wall time, bounded so an epoch keeps *min_rounds* merges.

    ``p = ceil(round_s * (1 - target) / (target * block_s))``, the smallest ``p`` with
    ``round_s / (p * block_s + round_s) <= target``, then clipped to
    ``[1, max(1, (most_blocks - 1) // (min_rounds - 1))]``, the longest period with
    ``ceil(most_blocks / p) >= min_rounds`` (for ``min_rounds`` 1: ``most_blocks``).

    Parameters
    ----------
    block_s : float or None
        Seconds of ``partial_fit`` per block (of the slowest replica).
    round_s : float or None
        Seconds a round costs beyond the training: copying, merging, messages.
    most_blocks : int
        The most blocks of any replica in one epoch.
    target : float, default=TARGET
        The largest share of wall time for coordination.
    min_rounds : int, default=MIN_ROUNDS
        The fewest rounds an epoch keeps.

    Returns
    -------
    int
        The period; 1 when a measurement is missing (``None``).

    Examples
    --------
    >>> from taskdml.parallel.engine._period import choose_period
    >>> choose_period(0.007, 0.004, 10)  # 11 blocks would be needed; 4 rounds allow 3
    3
    >>> choose_period(0.007, 0.0005, 100)  # 0.5 ms rounds: 0.5 * 19 / 7 = 1.36 -> 2
    2
    >>> choose_period(0.001, 0.004, 400)  # cheap blocks, expensive rounds: 76
    76
    """
    most_blocks, min_rounds = int(most_blocks), int(min_rounds)
    most = most_blocks if min_rounds <= 1 else (most_blocks - 1) // (min_rounds - 1)
    most = max(1, most)
    if block_s is None or round_s is None:
        return 1
    if block_s <= 0:
        return most
    needed = round_s * (1 - target) / (target * block_s)
    # A whisker below an integer is that integer (measurements are not that exact).
    return max(1, min(most, math.ceil(needed - 1e-9)))


def estimates(rounds):
    """``(block_s, round_s)`` from the infos of some rounds, or ``None`` for one not measured.

    Parameters
    ----------
    rounds : list of list of tuple
        Per round, every replica's info in rank order: ``(compute_s, blocks, overhead_s)``,
        where ``overhead_s`` is that replica's previous round's (``None`` in its first).

    Returns
    -------
    tuple of (float or None, float or None)
        The median over rounds of the slowest replica's seconds per block, and of the smallest
        overhead over replicas.

    Examples
    --------
    >>> from taskdml.parallel.engine._period import estimates
    >>> estimates([[(0.010, 1, None), (0.012, 1, None)], [(0.020, 2, 0.004), (0.0, 0, 0.009)]])
    (0.011, 0.004)
    """
    per_block = [
        max(compute / blocks for compute, blocks, _ in infos if blocks)
        for infos in rounds
        if any(blocks for _, blocks, _ in infos)
    ]
    overheads = [
        min(known)
        for known in ([o for _, _, o in infos if o is not None] for infos in rounds)
        if known
    ]
    return (
        statistics.median(per_block) if per_block else None,
        statistics.median(overheads) if overheads else None,
    )


class Period:
    """The period of one sync training, as each replica follows it (the same on all of them).

    Parameters
    ----------
    sync_every : int or "auto"
    most_blocks : int
        The most blocks of any replica in one epoch: every replica runs rounds until that
        many blocks are done, so all perform the same number of reduces.
    """

    def __init__(self, sync_every, most_blocks):
        if most_blocks < 1:  # a plan not built with the engine's _with_rounds
            raise ValueError(f"a sync training needs most_blocks >= 1, got {most_blocks!r}.")
        self.auto = sync_every == AUTO
        self.most_blocks = most_blocks
        self.period = 1 if self.auto else sync_every
        self.inputs = (None, None)  # (block_s, round_s) the current period was chosen from
        self.probing = self.auto
        self.rounds = []  # this epoch's infos ("auto" only)
        self.count = 0  # rounds in this epoch

    def blocks(self, done):
        """Blocks in the next round of the epoch, after *done* blocks (0 when it is over)."""
        if self.probing and len(self.rounds) >= PROBE_ROUNDS:
            self._decide()
        return min(self.period, self.most_blocks - done)

    def info(self, compute_s, blocks, overhead_s):
        """What this replica passes to the all-reduce (``None`` for an explicit period)."""
        return (compute_s, blocks, overhead_s) if self.auto else None

    def observe(self, infos):
        """Note one round's infos, as the all-reduce returned them."""
        self.count += 1
        if self.auto:
            self.rounds.append(infos)

    def end_epoch(self):
        """The facts of the epoch that ended; with ``"auto"``, choose the next epoch's period.

        Returns
        -------
        dict
            ``sync_every`` (the period, after the probe rounds in the first epoch) and
            ``rounds``; with ``"auto"`` also ``block_s`` and ``round_s``, its inputs.
        """
        if self.probing:
            self._decide()
        facts = {"sync_every": self.period, "rounds": self.count}
        if self.auto:
            facts["block_s"], facts["round_s"] = self.inputs
            self._decide()
        self.rounds, self.count = [], 0
        return facts

    def _decide(self):
        self.probing = False
        self.inputs = estimates(self.rounds)
        self.period = choose_period(*self.inputs, self.most_blocks)
