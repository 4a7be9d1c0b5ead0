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
  others), and the median over rounds. ``wait_s``: per round, the *mean* over replicas of
  each one's overhead beyond that smallest one (the seconds it sat in the all-reduce waiting
  for the slowest replica: the straggler wait that ``stats["reduce_wait_s"]`` sums up), and
  the median over rounds, recorded as ``straggler_wait_s``. Medians keep the first round's
  warm-up (first ``partial_fit`` allocations, the first connection to the actor) out of the
  estimate.
- **Why the wait counts, all of it.** A replica that waits is a core that idles: a round that
  costs the collective ``round_s`` also costs every replica ``wait_s`` on average, and on 16
  workers of a 16-core machine that was ten times the collective (issue 27: rounds of
  1.8-2.1 ms, waits of 0.21-0.34 s a replica over 14 rounds, 0.08 s over 3 rounds at
  ``sync_every=8``, which took 0.85 s against 1.15-1.25 s). The mean over replicas is the
  share of the cluster that idles, not one replica's worst luck. Counting only the part a
  longer period removes (the wait of the rounds less the wait of one round over the whole
  epoch) was the alternative; it is not taken because the wait per round hardly fell with
  longer periods there (about 0.02 s a round at 14 rounds, 0.027 s at 3: jitter of cores
  and blocks, which a longer round sums away), and the part it would leave out, a steady
  imbalance (one replica's blocks always larger), costs the same wall time at every period:
  counting it only lengthens the period towards the bound, which costs no time, and no more
  accuracy than the family's floor allows.
- **The formula.** A round costs ``p * block_s + round_s + wait_s`` of wall time,
  ``round_s + wait_s`` of it coordination, so the period is the smallest ``p`` with
  ``(round_s + wait_s) / (p * block_s + round_s + wait_s) <= TARGET``, that is
  ``p = ceil((round_s + wait_s) * (1 - TARGET) / (TARGET * block_s))``, at least 1, and at
  most ``max(1, (most_blocks - 1) // (min_merges - 1))`` (``most_blocks``: the most blocks of
  any replica in one epoch; ``most_blocks`` itself when ``min_merges`` is 1), the longest
  period that still leaves ``ceil(most_blocks / p) >= min_merges`` merges an epoch. The wait
  is measured at the period in force and taken as a cost per round: a wait that grows with
  the period (a steady imbalance) makes the next epoch's period longer again, up to the
  bound.
- **The floor, per family.** ``min_merges`` is the merge rule's
  (:attr:`~taskdml.parallel.merge.MergeRule.min_merges`), :data:`MIN_ROUNDS` (4) for a rule
  that names none. The measurements below set it: 1 for the linear SGD family
  (``SGDClassifier``, ``SGDRegressor``, ``Perceptron``, ``PassiveAggressive*``,
  ``SGDOneClassSVM``: one rule), 4 for the MLPs; every other family keeps 4 (not measured).
  Each epoch's history records the floor it was chosen with (``min_merges``).
- **When.** The first ``PROBE_ROUNDS`` rounds of a training run with period 1 and are
  measured; the period chosen from them holds for the rest of the first epoch. After every
  epoch it is chosen again from that epoch's rounds and holds for the next one (so a change
  of load is followed, at most once per epoch). The epoch boundary, the validation score and
  early stopping stay at the end of each epoch; a replica with fewer blocks contributes no
  rows to the rounds it has nothing for, so every replica performs the same number of reduces.

The floors were measured: holdout accuracy of ``train(..., sync_every=p,
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

The linear floor was checked against the serial ``partial_fit`` loop at equal epochs as well,
on the data sets of ``benchmarks/averaging.py`` (the site table and the synthetic
classification and regression sets, 8 chunks in order, 2 replicas, 5 seeds; threads): one
merge an epoch (``sync_every=4``) against four (``sync_every=1``), the mean difference from
the serial loop over the 20 family × data × epochs rows moved by -1.98 to +1.54 points (hinge
on the site table, 1 epoch: +3.54 to +1.56; Perceptron on the synthetic set, 5 epochs: +3.03
to +4.57), both above the serial loop on average, Huber regression -7.83 to -7.46 after 5
epochs; the spread over seeds was of the same size, narrower in some rows and wider in others.

So the MLPs keep at least 4 merges an epoch (their loss stays within 0.5 points, 0.31 at
worst), and the linear SGD family 1: it gave nothing up even at one merge an epoch. On the
benchmark with rounds through the actor (about 4 ms against 7 ms a block) the MLP's bound of
4 merges would bind: the formula asks for 11 blocks a round, the bound allows 3, and
coordination falls from about 36 % of the wall time to 16 %; with a collective of 0.5 ms
(1 ms) the formula's own 2 (3) holds: 3.4 % (4.5 %).

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
"""The fewest merges in an epoch that ``"auto"`` keeps (when there are that many blocks) for a
family whose merge rule names no floor of its own (``MergeRule.min_merges``)."""

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


def choose_period(
    block_s, round_s, most_blocks, *, wait_s=0.0, target=TARGET, min_rounds=MIN_ROUNDS
):
    """The period ``"auto"`` chooses: the fewest blocks per round that keep coordination (the
    collective and the wait for the slowest replica) at most *target* of a round's wall time,
    bounded so an epoch keeps *min_rounds* merges.

    ``p = ceil((round_s + wait_s) * (1 - target) / (target * block_s))``, the smallest ``p``
    with ``(round_s + wait_s) / (p * block_s + round_s + wait_s) <= target``, then clipped to
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
    wait_s : float or None, default=0.0
        Seconds a replica waits for the slowest one in a round, on average (``None``: not
        measured, counted as 0).
    target : float, default=TARGET
        The largest share of wall time for coordination.
    min_rounds : int, default=MIN_ROUNDS
        The fewest rounds an epoch keeps (the family's ``min_merges``).

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
    >>> choose_period(0.08, 0.002, 8, wait_s=0.02, min_rounds=1)  # 22 * 19 / 80 = 5.2 -> 6
    6
    """
    most_blocks, min_rounds = int(most_blocks), int(min_rounds)
    most = most_blocks if min_rounds <= 1 else (most_blocks - 1) // (min_rounds - 1)
    most = max(1, most)
    if block_s is None or round_s is None:
        return 1
    cost = round_s + (wait_s or 0.0)
    if block_s <= 0:
        return most
    needed = cost * (1 - target) / (target * block_s)
    # A whisker below an integer is that integer (measurements are not that exact).
    return max(1, min(most, math.ceil(needed - 1e-9)))


def estimates(rounds):
    """``(block_s, round_s, wait_s)`` from the infos of some rounds, ``None`` for one not
    measured.

    Parameters
    ----------
    rounds : list of list of tuple
        Per round, every replica's info in rank order: ``(compute_s, blocks, overhead_s)``,
        where ``overhead_s`` is that replica's previous round's (``None`` in its first).

    Returns
    -------
    tuple of (float or None, float or None, float or None)
        The median over rounds of the slowest replica's seconds per block, of the smallest
        overhead over replicas, and of the mean over replicas of the overhead beyond that
        smallest one (the wait for the slowest replica).

    Examples
    --------
    >>> from taskdml.parallel.engine._period import estimates
    >>> infos = [[(0.010, 1, None), (0.012, 1, None)], [(0.020, 2, 0.004), (0.0, 0, 0.010)]]
    >>> [round(value, 6) for value in estimates(infos)]
    [0.011, 0.004, 0.003]
    """
    per_block = [
        max(compute / blocks for compute, blocks, _ in infos if blocks)
        for infos in rounds
        if any(blocks for _, blocks, _ in infos)
    ]
    known = [k for k in ([o for _, _, o in infos if o is not None] for infos in rounds) if k]
    overheads = [min(k) for k in known]
    waits = [sum(o - min(k) for o in k) / len(k) for k in known]
    return (
        statistics.median(per_block) if per_block else None,
        statistics.median(overheads) if overheads else None,
        statistics.median(waits) if waits else None,
    )


class Period:
    """The period of one sync training, as each replica follows it (the same on all of them).

    Parameters
    ----------
    sync_every : int or "auto"
    most_blocks : int
        The most blocks of any replica in one epoch: every replica runs rounds until that
        many blocks are done, so all perform the same number of reduces.
    min_merges : int or None, default=None
        The fewest merges an epoch keeps with ``"auto"`` (the merge rule's ``min_merges``);
        ``None``: :data:`MIN_ROUNDS`.
    """

    def __init__(self, sync_every, most_blocks, min_merges=None):
        if most_blocks < 1:  # a plan not built with the engine's _with_rounds
            raise ValueError(f"a sync training needs most_blocks >= 1, got {most_blocks!r}.")
        self.auto = sync_every == AUTO
        self.most_blocks = most_blocks
        self.min_merges = MIN_ROUNDS if min_merges is None else int(min_merges)
        self.period = 1 if self.auto else sync_every
        self.inputs = (None, None, None)  # (block_s, round_s, wait_s) of the current period
        self.probing = self.auto
        self.rounds = []  # this epoch's infos ("auto" only)
        self.count = 0  # rounds in this epoch

    def blocks(self, done):
        """Blocks in the next round of the epoch, after *done* blocks (0 when it is over)."""
        left = self.most_blocks - done
        if left > 0 and self.probing and len(self.rounds) >= PROBE_ROUNDS:
            self._decide()  # not when the probe covered the epoch: end_epoch records period 1
        return min(self.period, left)

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
            ``rounds``; with ``"auto"`` also ``block_s``, ``round_s`` and
            ``straggler_wait_s`` (``wait_s``), its inputs, and ``min_merges``, the floor it
            was chosen with.
        """
        ran = self.period  # an epoch its probe rounds covered whole ran with period 1
        if self.probing:
            self._decide()
        facts = {"sync_every": ran, "rounds": self.count}
        if self.auto:
            facts["block_s"], facts["round_s"], facts["straggler_wait_s"] = self.inputs
            facts["min_merges"] = self.min_merges
            self._decide()
        self.rounds, self.count = [], 0
        return facts

    def _decide(self):
        self.probing = False
        self.inputs = estimates(self.rounds)
        block_s, round_s, wait_s = self.inputs
        self.period = choose_period(
            block_s, round_s, self.most_blocks, wait_s=wait_s, min_rounds=self.min_merges
        )
