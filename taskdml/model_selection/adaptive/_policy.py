"""Who trains next, and for how long: the rung logic of the adaptive searches, without Dask.

A *policy* sees trials only as ids with scores. The driver (``_adaptive_run``) asks it for a
job whenever a slot is free (:meth:`next_job` returns ``(trial, rung)``: train that trial up
to that rung's budget) and tells it every result (:meth:`record`) or failure (:meth:`fail`).
After each, :meth:`take_finished` hands back the trials that will never train again, so their
state can be released at once.

- :class:`ASHA` (Li et al., MLSys 2020, Algorithm 2): a result at rung ``k`` is compared with
  the results recorded at ``k`` *so far*; a trial in the top ``len(rung_k) // eta`` is
  promotable. The trial that just reported is promoted first, then the promotable trials of
  the highest rungs, then a new trial starts. Nothing waits for a rung to fill, and a promotion
  is never taken back (so, as in the paper, early promotions can exceed ``1/eta`` of a rung's
  final count). A paused trial is finished (stopped) as soon as it can never be promoted:
  its rank at its rung is beyond ``1/eta`` of every result that rung could still receive.
- :class:`Halving`: synchronous successive halving. Every trial of a rung reports, then the
  top ``max(1, n // eta)`` go on and the others stop.
- :class:`Concurrent`: several policies side by side (Hyperband's brackets): jobs are taken
  from them in turn, so every bracket advances at once.

Ranks break ties by trial id, so synchronous decisions are deterministic.
"""

import collections
import itertools


def rung_budgets(min_budget, max_budget, eta):
    """``min_budget * eta**k`` below *max_budget*, then *max_budget* (integers throughout).

    >>> rung_budgets(1, 27, 3)
    [1, 3, 9, 27]
    >>> rung_budgets(2, 20, 3)
    [2, 6, 18, 20]
    """
    budgets, budget = [], min_budget
    while budget < max_budget:
        budgets.append(budget)
        budget *= eta
    return budgets + [max_budget]


def hyperband_brackets(max_iter, eta=3):
    """Hyperband's brackets ``{s: (n_models, first_budget)}``, as dask-ml's
    ``_get_hyperband_params`` but with ``s_max`` found by an integer loop (dask-ml's
    ``math.log(243, 3)`` is ``4.999...``, which loses a bracket).

    >>> hyperband_brackets(81)
    {4: (81, 1), 3: (34, 3), 2: (15, 9), 1: (8, 27), 0: (5, 81)}
    >>> len(hyperband_brackets(243))
    6
    """
    s_max = 0
    while eta ** (s_max + 1) <= max_iter:
        s_max += 1
    # n = ceil(B/R * eta**s / (s+1)) with B = (s_max+1) R, in integers.
    return {
        s: (-(-(s_max + 1) * eta**s // (s + 1)), max_iter // eta**s) for s in range(s_max, -1, -1)
    }


def halving_schedule(n_models, first_budget, eta, n_rungs):
    """``[(n_i, r_i)]``: models trained and their budget at each rung of one bracket.

    >>> halving_schedule(81, 1, 3, 5)
    [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)]
    """
    return [(max(1, n_models // eta**i), first_budget * eta**i) for i in range(n_rungs)]


def _best_first(results):
    """Trial ids of ``{trial: score}`` best first; ties by trial id."""
    return sorted(results, key=lambda trial: (-results[trial], trial))


class ASHA:
    """Asynchronous successive halving over *trials* (ids, started in order)."""

    def __init__(self, trials, budgets, eta):
        self.budgets = list(budgets)
        self.eta = eta
        self.unstarted = collections.deque(trials)
        self.results = [{} for _ in self.budgets]  # rung -> {trial: score}
        self.promoted = [set() for _ in self.budgets]
        self.running = {}  # trial -> rung it is training to
        self.paused = {}  # trial -> rung it reported last
        self.fresh = []  # just reported, promoted first
        self.finished = []

    def next_job(self):
        while self.fresh:
            trial = self.fresh.pop()
            if trial in self.paused and trial in self._promotable(self.paused[trial]):
                return self._promote(trial)
        for rung in range(len(self.budgets) - 2, -1, -1):
            for trial in self._promotable(rung):
                return self._promote(trial)
        if self.unstarted:
            trial = self.unstarted.popleft()
            self.running[trial] = 0
            return trial, 0
        return None

    def n_waiting(self):
        """Jobs that could start now: promotable trials and trials not started."""
        return len(self.unstarted) + sum(
            len(self._promotable(r)) for r in range(len(self.budgets) - 1)
        )

    def record(self, trial, rung, score, final=False):
        del self.running[trial]
        self.results[rung][trial] = score
        if rung == len(self.budgets) - 1 or final:
            self.finished.append(trial)
        else:
            self.paused[trial] = rung
            self.fresh.append(trial)
        self._stop_hopeless()

    def fail(self, trial):
        self.running.pop(trial, None)
        self._stop_hopeless()

    def take_finished(self):
        finished, self.finished = self.finished, []
        return finished

    def _promotable(self, rung):
        top = _best_first(self.results[rung])[: len(self.results[rung]) // self.eta]
        return [t for t in top if t not in self.promoted[rung] and self.paused.get(t) == rung]

    def _promote(self, trial):
        rung = self.paused.pop(trial)
        self.promoted[rung].add(trial)
        self.running[trial] = rung + 1
        return trial, rung + 1

    def _stop_hopeless(self):
        """Finish paused trials that no future result can make promotable.

        A result only pushes the ranks of those recorded before it down, so a trial ranked
        ``slots`` or worse at its rung, where ``slots = (recorded + could still arrive) // eta``,
        is never promoted. At most the unpromoted trials of a rung (paused there, or still to
        arrive) can be promoted out of it later, which bounds the arrivals at the next rung.
        """
        arriving = len(self.unstarted)
        for rung in range(len(self.budgets) - 1):
            arriving += sum(1 for target in self.running.values() if target == rung)
            slots = (len(self.results[rung]) + arriving) // self.eta
            for rank, trial in enumerate(_best_first(self.results[rung])):
                if rank >= slots and self.paused.get(trial) == rung:
                    del self.paused[trial]
                    self.finished.append(trial)
            arriving += sum(1 for at in self.paused.values() if at == rung)

    def done(self):
        return not (self.running or self.unstarted or self.paused)


class Halving:
    """Synchronous successive halving: *schedule* is ``[(n_i, budget_i)]`` per rung."""

    def __init__(self, trials, schedule):
        self.schedule = list(schedule)
        self.budgets = [budget for _, budget in self.schedule]
        self.rung = 0
        self.queue = collections.deque(trials)
        self.waiting_for = set(trials)
        self.results = [{} for _ in self.schedule]
        self.plateaued = set()
        self.finished = []

    def next_job(self):
        if self.queue:
            return self.queue.popleft(), self.rung
        return None

    def n_waiting(self):
        return len(self.queue)

    def record(self, trial, rung, score, final=False):
        self.results[rung][trial] = score
        self.waiting_for.discard(trial)
        if final:  # stopped on a plateau: ranked, never promoted
            self.plateaued.add(trial)
            self.finished.append(trial)
        self._maybe_advance()

    def fail(self, trial):
        self.waiting_for.discard(trial)
        self._maybe_advance()

    def _maybe_advance(self):
        if self.waiting_for or self.queue:
            return
        ranked = [t for t in _best_first(self.results[self.rung]) if t not in self.plateaued]
        if self.rung == len(self.schedule) - 1:
            self.finished.extend(ranked)
            self.rung += 1
            return
        n_next, _ = self.schedule[self.rung + 1]
        keep = ranked[:n_next] if ranked else []
        self.finished.extend(t for t in ranked if t not in keep)
        self.rung += 1
        self.queue.extend(keep)
        self.waiting_for = set(keep)

    def take_finished(self):
        finished, self.finished = self.finished, []
        return finished

    def done(self):
        return self.rung >= len(self.schedule) or not (self.queue or self.waiting_for)


class Concurrent:
    """Several policies run side by side (Hyperband's brackets); *owner* maps trial -> policy."""

    def __init__(self, policies, owner):
        self.policies = list(policies)
        self.owner = owner
        self._turn = itertools.cycle(range(len(self.policies)))

    def next_job(self):
        for _ in range(len(self.policies)):
            job = self.policies[next(self._turn)].next_job()
            if job is not None:
                return job
        return None

    def n_waiting(self):
        return sum(policy.n_waiting() for policy in self.policies)

    def record(self, trial, rung, score, final=False):
        self.owner[trial].record(trial, rung, score, final)

    def fail(self, trial):
        self.owner[trial].fail(trial)

    def take_finished(self):
        return [trial for policy in self.policies for trial in policy.take_finished()]

    def done(self):
        return all(policy.done() for policy in self.policies)

    def budgets_of(self, trial):
        return self.owner[trial].budgets
