"""The all-reduce of sync training as direct messages between the replicas' worker processes.

Each replica sends its model straight to the other replicas' workers over distributed's own
comms (TCP or TLS, opened with the worker's ``connection_args``), one connection per pair of
workers that talk, opened at the first message and kept for later trainings. A message is
written on the worker's event loop and lands in the *mailbox* of its replica on the
receiving worker (the ``taskdml_collective`` handler, which :class:`CollectivePlugin`
installs on every worker once per client); the replica thread waits there. No actor,
scheduler or client is in the loop.

**The collective is a recursive-doubling all-gather**, after which every replica merges all
``R`` replicas itself, in rank order, with :func:`~taskdml.parallel.collective._server.merge_ranked`
- the very merge the actor computes, so both give the same model, bit for bit. Why this
collective and not a reduction tree or a ring:

- merge rules are not pairwise-associative in general (:func:`merge_replicas` checks that
  its replicas share one round start, and a partial merge starts a new round), so an exact
  result needs every replica's model at the merging site: an all-gather, not a
  reduce-scatter;
- recursive doubling needs ``ceil(log2 R)`` message latencies (plus two when ``R`` is not a
  power of two: the extra ranks fold into a partner first and get the result back at the
  end) and moves ``(R - 1)`` models into each replica, the minimum any all-gather moves; a
  ring moves the same bytes in ``R - 1`` latencies, so it never wins here, and a
  gather-to-one plus broadcast moves as much into the root and adds ``log2 R`` latencies;
- for the models data-parallel training merges (tens to a few thousand parameters for
  linear models and clusterings, a few MB for an MLP) the latency term dominates up to
  hundreds of replicas: 40 doubles are about 1 kB pickled, about 1 us on the wire.

The bandwidth term still grows with ``R`` times the model size; a large network on hundreds
of replicas would want a reduce-scatter of its flattened weights, which needs rules written
for it (not done).

Rank 0's initial estimator and its epoch reports go down a binomial tree
(:meth:`DirectAllReduce.broadcast`).

The same mailboxes carry the messages of graph supersteps (:mod:`taskdml.graph`): a
point-to-point :meth:`~DirectAllReduce.send` / :meth:`~DirectAllReduce.receive` of any value
between two ranks, and :meth:`~DirectAllReduce.allreduce_sum`, the recursive doubling above
applied to a small vector of numbers (summed in rank order, so every rank gets the same
floats and takes the same decision). A graph's collective has no merge rule (``rule=None``).
Bounded-staleness supersteps add :meth:`~DirectAllReduce.receive_newest` (the newest message
of a sender numbered in a range, waited for only while there is none; the older ones are
dropped) and :meth:`~DirectAllReduce.poll` (a message if it came, without waiting).

Failure: a replica that fails sends ``abort`` to every other one, which raises at once; when
a worker dies its connections close, and a replica waiting for one of its replicas raises
naming it; a peer that never sends is pinged every few seconds while waited for.
"""

import asyncio
import contextlib
import pickle
import threading
import time
import uuid
import weakref

from taskdml import _compat
from taskdml.parallel.collective._server import merge_ranked

HANDLER = "taskdml_collective"
"""The worker handler that receives collective messages."""

TIMINGS = ("serialize_s", "wire_s", "wait_s", "merge_s")
"""The seconds each replica's collective sums over its rounds (see ``leave``)."""

PING_AFTER_S = 2.0  # waiting this long for a peer: check that its worker is still there


def steps(n_replicas, rank):
    """The recursive-doubling schedule of *rank*: ``(tag, send_to, receive_from)`` per step.

    With ``p`` the largest power of two <= *n_replicas*, ranks ``p`` and above first send
    their model to ``rank - p`` ("fold") and wait for the full set from it ("unfold"); ranks
    under ``p`` exchange everything they hold with ``rank XOR 2**k`` for each ``k``.

    Examples
    --------
    >>> steps(2, 0)
    [('x0', 1, 1)]
    >>> steps(3, 2)
    [('fold', 0, None), ('unfold', None, 0)]
    >>> steps(3, 0)
    [('fold', None, 2), ('x0', 1, 1), ('unfold', 2, None)]
    """
    p = 1 << (n_replicas.bit_length() - 1)
    if rank >= p:
        return [("fold", rank - p, None), ("unfold", None, rank - p)]
    extra = rank + p if rank + p < n_replicas else None
    schedule = [("fold", None, extra)] if extra is not None else []
    schedule += [(f"x{k}", rank ^ (1 << k), rank ^ (1 << k)) for k in range(p.bit_length() - 1)]
    if extra is not None:
        schedule.append(("unfold", extra, None))
    return schedule


ABORT_FLUSH_S = 2.0
"""Seconds a failing replica waits for its abort messages to go out (one to a worker that
died would wait for the connect timeout) before it leaves."""


class DirectAllReduce:
    """The all-reduce of one training, between replica tasks on the given workers.

    Built by the engine on the client (``addresses[rank]`` is the worker that runs replica
    ``rank``) and pickled into every replica task; it binds to its worker at first use.
    Methods are the all-reduce's (``reduce``, ``broadcast``, ``abort``), blocking, called
    from the replica's thread, between ``join`` at the start of the replica and ``leave`` at
    its end.
    """

    def __init__(self, addresses, rule=None, timeout=600.0):
        self.training = uuid.uuid4().hex
        self.addresses = list(addresses)
        self.rule, self.timeout = rule, timeout
        self._worker = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state):
        self.__dict__.update(state, _worker=None)

    # -- the replica's side ---------------------------------------------------------------

    def join(self, rank):
        """Bind to this worker as replica *rank* (at the start of the replica task)."""
        from distributed import get_worker

        self._worker, self._rank = get_worker(), rank
        self._box = _mailbox((self.training, rank))
        self._sends = []
        self.timings = dict.fromkeys(TIMINGS, 0.0)
        self.round_times_s = []

    def reduce(self, round_id, rank, replica, rows, info=None):
        """Contribute *replica* (which saw *rows* rows) and *info*; return the merge of every
        replica, in rank order, and every replica's *info*."""
        began = time.perf_counter()
        held = {rank: (pickle.dumps(replica, protocol=5), rows, info)}
        self.timings["serialize_s"] += time.perf_counter() - began
        for tag, send_to, receive_from in steps(len(self.addresses), rank):
            tag = f"{round_id}:{tag}"
            if send_to is not None:
                self._send(send_to, tag, items=_as_list(held))
            if receive_from is not None:
                held.update(_as_dict(self._receive(receive_from, tag)["items"]))
        unpickled = time.perf_counter()
        ranked = [
            (replica if r == rank else pickle.loads(held[r][0]), held[r][1])
            for r in range(len(self.addresses))
        ]
        merging = time.perf_counter()
        self.timings["serialize_s"] += merging - unpickled
        merged = merge_ranked(ranked, self.rule)
        done = time.perf_counter()
        self.timings["merge_s"] += done - merging
        self.round_times_s.append(done - began)
        return merged, [held[r][2] for r in range(len(self.addresses))]

    def broadcast(self, tag, rank, value=None):
        """Rank 0's *value* to every replica, down a binomial tree (``ceil(log2 R)`` steps):
        replica ``r`` receives from ``r - 2**h`` (``2**h`` the highest bit of ``r``) and
        passes it on to ``r + 2**b`` for every ``b > h``."""
        tag = f"broadcast:{tag}"
        if rank:
            value = pickle.loads(self._receive(rank - (1 << (rank.bit_length() - 1)), tag)["value"])
        payload = None
        for bit in range(rank.bit_length(), len(self.addresses).bit_length()):
            peer = rank + (1 << bit)
            if peer < len(self.addresses):
                payload = payload or pickle.dumps(value, protocol=5)
                self._send(peer, tag, value=payload)
        return value

    def send(self, peer, tag, value):
        """Send *value* (anything that pickles) to rank *peer* under *tag*; returns at once
        (the message is written on the worker's event loop, see ``leave``: *value* must not
        change until then).

        *value* travels as its own frames (``distributed.protocol.to_serialize``): a NumPy
        array's buffer is written to the socket as it is and read into the array the
        receiver gets, with no pickling and no copy into the message (a graph superstep's
        mirror values are megabytes; pickling them into the message copied them three
        more times and tripled the exchange)."""
        self._send(peer, f"p2p:{tag}", value=_compat.as_frames(value))

    def receive(self, sender, tag):
        """The value rank *sender* sent under *tag*, waited for here (raises if a rank
        failed, the sender's worker died, or nothing came within the timeout). An array
        may be read-only: it is the buffer the message was read into."""
        return self._receive(sender, f"p2p:{tag}")["value"]

    def poll(self, sender, tag):
        """The value rank *sender* sent under *tag* if it has come, else ``None`` (no
        wait; raises if a rank failed)."""
        message = self._box.take(sender, f"p2p:{tag}", timeout=0)
        return None if message is None else message["value"]

    def receive_newest(self, sender, oldest, newest):
        """The newest value rank *sender* sent under an integer tag in ``oldest ..
        newest``, waited for here only while it sent none (as :meth:`receive`), and its
        number; the older ones it sent are dropped, that one stays until a newer one is
        read (bounded-staleness supersteps)."""
        message, number = self._receive(sender, (oldest, newest))
        return message["value"], number

    def allreduce_sum(self, tag, rank, values):
        """The sum over every rank of its *values* (a 1-D array of floats), added in rank
        order so that every rank gets the very same floats."""
        import numpy as np

        held = {rank: (np.asarray(values, dtype=float).tolist(), 0, None)}
        for step, send_to, receive_from in steps(len(self.addresses), rank):
            step = f"sum:{tag}:{step}"
            if send_to is not None:
                self._send(send_to, step, items=_as_list(held))
            if receive_from is not None:
                held.update(_as_dict(self._receive(receive_from, step)["items"]))
        total = np.zeros(len(held[rank][0]))
        for r in range(len(self.addresses)):
            total = total + np.asarray(held[r][0], dtype=float)
        return total

    def abort(self, message):
        """Tell every other replica that this one failed (they raise at once)."""
        self._box.fail(message)
        self._sends = []  # earlier sends no longer matter (one may be why this replica fails)
        for peer in range(len(self.addresses)):
            if peer != self._rank:
                self._send(peer, "abort", abort=message)
        with contextlib.suppress(Exception):
            self._flush(timeout=ABORT_FLUSH_S)
        for _, future in self._sends:  # to a worker that is gone: connecting would take long
            future.cancel()
        self._sends = []

    def leave(self, rank):
        """End this replica's part: wait for its last messages to go out and drop its
        mailbox (the connections stay open for the next training); return its timings
        (seconds, summed over rounds, and ``round_times_s``: each round's seconds in the
        collective)."""
        try:
            self._flush(self.timeout)
        finally:
            _drop_mailbox((self.training, self._rank))
        return {**self.timings, "round_times_s": self.round_times_s}

    # -- messages ---------------------------------------------------------------------------

    def _send(self, peer, tag, **content):
        message = {
            "training": self.training,
            "sender": self._rank,
            "receiver": peer,
            "tag": tag,
            "sent": time.time(),
            **content,
        }
        self._check_sends()  # a failed earlier send raises here; finished ones are dropped
        loop = self._worker.loop.asyncio_loop
        coroutine = _write(self._worker, self.addresses[peer], message)
        self._sends.append((peer, asyncio.run_coroutine_threadsafe(coroutine, loop)))

    def _receive(self, sender, tag):
        """Wait for the message *tag* from *sender*, checking on the way that no replica
        failed, no send failed, and the sender's worker is still there (*tag* ``(oldest,
        newest)``: the newest point-to-point message numbered in that range, and its
        number)."""
        waited_from = time.perf_counter()
        deadline = waited_from + self.timeout
        next_ping = waited_from + PING_AFTER_S
        numbered = isinstance(tag, tuple)  # (oldest, newest): the newest p2p message in range
        while True:
            if numbered:
                found = self._box.take_newest(sender, _p2p_superstep, *tag, timeout=0.5)
                message, number = found if found is not None else (None, None)
            else:
                message = self._box.take(sender, tag, timeout=0.5)
            if message is not None:
                blocked = time.perf_counter() - waited_from
                wire = min(blocked, max(0.0, message["arrived"] - message["sent"]))
                self.timings["wire_s"] += wire
                self.timings["wait_s"] += blocked - wire
                return (message, number) if numbered else message
            self._check_sends()
            now = time.perf_counter()
            if now > deadline:
                raise TimeoutError(
                    f"replica {self._rank}: no message from replica {sender} within "
                    f"{self.timeout:.0f} s: its worker may be stuck, or another training "
                    "holds the threads it needs."
                )
            if now > next_ping:
                self._ping(sender)
                next_ping = now + PING_AFTER_S

    def _check_sends(self):
        for peer, future in self._sends:
            if future.done() and future.exception() is not None:
                error = future.exception()
                raise ConnectionError(
                    f"replica {self._rank} could not send to replica {peer} at "
                    f"{self.addresses[peer]}: {type(error).__name__}: {error}. Its worker "
                    "died or cannot be reached from this one."
                ) from error
        self._sends = [(peer, f) for peer, f in self._sends if not f.done()]

    def _ping(self, peer):
        address = self.addresses[peer]
        loop = self._worker.loop.asyncio_loop
        identity = _compat.worker_identity(self._worker, address)
        try:
            asyncio.run_coroutine_threadsafe(identity, loop).result(PING_AFTER_S * 5)
        except Exception as error:
            raise ConnectionError(
                f"replica {self._rank}: replica {peer}'s worker {address} does not answer "
                f"({type(error).__name__}: {error}): it died or was stopped."
            ) from error

    def _flush(self, timeout):
        """Wait until every message this replica sent is written."""
        deadline = time.perf_counter() + timeout
        for _, future in self._sends:
            with contextlib.suppress(Exception):
                future.result(max(0.0, deadline - time.perf_counter()))
        self._check_sends()


# -- connections, in each worker process ----------------------------------------------------

_LINKS = {}  # (this worker's address, peer worker's address) -> _Link; on the event loop only


async def _write(worker, address, message):
    """Write *message* to the worker at *address* on the one connection this worker keeps to
    it (opened at the first message, reopened after a failure)."""
    key = (worker.address, address)
    if key not in _LINKS:
        _LINKS[key] = _Link()
    link = _LINKS[key]
    async with link.lock:
        if link.comm is None or link.comm.closed():
            link.comm = await _compat.connect_worker(worker, address)
            await link.comm.write({"op": HANDLER, "reply": False, "origin": worker.address})
        try:
            await link.comm.write(message)
        except Exception:
            link.comm = None
            raise


class _Link:
    """One outgoing connection; writes on it take turns, in the order they were sent."""

    def __init__(self):
        self.comm, self.lock = None, asyncio.Lock()


def _as_list(held):
    return [[rank, payload, rows, info] for rank, (payload, rows, info) in held.items()]


def _as_dict(items):
    return {rank: (payload, rows, info) for rank, payload, rows, info in items}


# -- the receiving side, in each worker process ----------------------------------------------


class Mailbox:
    """Messages to one replica of one training that arrived at its worker, until it takes
    them (two replicas on one worker have a mailbox each)."""

    def __init__(self):
        self.condition = threading.Condition()
        self.messages = {}
        self.failed = None
        self.disconnected = {}

    def put(self, sender, message):
        with self.condition:
            if "abort" in message:
                self.failed = self.failed or message["abort"]
            else:
                self.messages[(sender, message["tag"])] = message
            self.condition.notify_all()

    def disconnect(self, sender, reason):
        with self.condition:
            self.disconnected[sender] = reason
            self.condition.notify_all()

    def fail(self, message):
        with self.condition:
            self.failed = self.failed or message
            self.condition.notify_all()

    def take(self, sender, tag, timeout):
        """The message, or ``None`` after *timeout* s; raises if a replica failed or the
        sender disconnected without sending it."""
        key = (sender, tag)
        with self.condition:
            self.condition.wait_for(
                lambda: key in self.messages or self.failed or sender in self.disconnected,
                timeout,
            )
            if key in self.messages:
                return self.messages.pop(key)
            if self.failed:
                raise RuntimeError(f"another replica failed: {self.failed}")
            if sender in self.disconnected:
                raise ConnectionError(
                    f"replica {sender} closed its connection before sending {tag!r}: "
                    f"{self.disconnected[sender]}"
                )
            return None

    def take_newest(self, sender, order, oldest, newest, timeout):
        """The message from *sender* whose tag has the largest ``order(tag)`` in ``oldest
        .. newest`` and that number, ``(message, number)``, or ``None`` after *timeout* s
        (raising as :meth:`take`). It stays (the next superstep may read it again, if none
        newer came); *sender*'s messages numbered below it are dropped.
        ``order`` gives ``None`` for the tags it does not number."""

        def numbered():
            found = {}
            for key in self.messages:
                number = order(key[1]) if key[0] == sender else None
                if number is not None:
                    found[number] = key
            return found

        with self.condition:
            self.condition.wait_for(
                lambda: (
                    any(oldest <= n <= newest for n in numbered())
                    or self.failed
                    or sender in self.disconnected
                ),
                timeout,
            )
            found = numbered()
            usable = [n for n in found if oldest <= n <= newest]
            if usable:
                number = max(usable)
                for n, key in found.items():
                    if n < number:
                        del self.messages[key]
                return self.messages[found[number]], number  # kept: may be read again
            if self.failed:
                raise RuntimeError(f"another replica failed: {self.failed}")
            if sender in self.disconnected:
                raise ConnectionError(
                    f"replica {sender} closed its connection before sending a message "
                    f"numbered {oldest} .. {newest}: {self.disconnected[sender]}"
                )
            return None


def _p2p_superstep(tag):
    """The integer a point-to-point tag ``"p2p:<int>"`` carries, or ``None``."""
    if isinstance(tag, str) and tag.startswith("p2p:") and tag[4:].isdigit():
        return int(tag[4:])
    return None


_MAILBOXES = {}
_FINISHED = {}  # replicas that ended here (bounded), whose late messages are dropped
_MAILBOXES_LOCK = threading.Lock()


def _mailbox(replica):
    """The mailbox of *replica*, ``(training, rank)``, made at its first message or join."""
    with _MAILBOXES_LOCK:
        if replica in _FINISHED:
            return Mailbox()  # a late message: goes nowhere
        return _MAILBOXES.setdefault(replica, Mailbox())


def _drop_mailbox(replica):
    with _MAILBOXES_LOCK:
        _MAILBOXES.pop(replica, None)
        _FINISHED[replica] = True
        while len(_FINISHED) > 1000:
            del _FINISHED[next(iter(_FINISHED))]


async def receive(comm, origin):
    """The ``taskdml_collective`` handler: put the messages the worker at *origin* sends into
    their replicas' mailboxes until the connection closes; then tell the replicas still
    waiting for a sender on it."""
    senders = set()  # (replica, sender rank) that used this connection
    try:
        while True:
            message = await comm.read()
            message["arrived"] = time.time()
            replica = (message["training"], message["receiver"])
            senders.add((replica, message["sender"]))
            _mailbox(replica).put(message["sender"], message)
            if len(senders) > 1000:
                senders = {(r, s) for r, s in senders if r in _MAILBOXES}
    except (_compat.CommClosedError, OSError) as error:
        reason = f"the connection from worker {origin} closed ({type(error).__name__})"
        for replica, sender in senders:
            box = _MAILBOXES.get(replica)
            if box is not None:
                box.disconnect(sender, reason)
    return _compat.no_reply()


try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:  # pragma: no cover - distributed is a dependency
    WorkerPlugin = object


class CollectivePlugin(WorkerPlugin):
    """Installs the ``taskdml_collective`` handler on every worker (and on workers that join
    later)."""

    name = "taskdml-collective"
    idempotent = True  # another client of the cluster registers it again: nothing to redo

    def setup(self, worker):
        _compat.set_worker_handler(worker, HANDLER, receive)


def handler_state(dask_worker):
    """Why this worker cannot receive collective messages, or ``None`` if it can."""
    if _compat.handler_blocked(dask_worker, HANDLER):
        return f"its '{HANDLER}' handler is blocked (distributed.worker.blocked-handlers)"
    if _compat.worker_handler(dask_worker, HANDLER) is not receive:
        return f"the '{HANDLER}' handler is not installed"
    return None


# Workers known to receive direct collective messages, per client (the plugin that installs
# the handler is registered once per client; workers that join later get it too).
_READY = weakref.WeakKeyDictionary()  # client -> {worker address: reason or None}
_READY_LOCK = threading.Lock()


def unavailable(client, addresses):
    """Why ranks on the workers *addresses* cannot message each other directly, or ``None``
    if they can (installs the handler on the client's workers, once per client)."""
    if any(address.startswith("inproc://") for address in addresses):
        return (
            "the workers are threads of one process on inproc:// (the direct messages "
            "are written for separate processes; a LocalCluster with processes=False "
            "and protocol='tcp://' uses them)"
        )
    with _READY_LOCK:
        known = _READY.get(client)
        if known is None or any(address not in known for address in addresses):
            if known is None:
                client.register_plugin(CollectivePlugin())
            known = _READY[client] = client.run(handler_state)
    for address in addresses:
        if address not in known:
            return f"worker {address} left the cluster"
        if known[address] is not None:
            return f"worker {address} cannot receive them: {known[address]}"
    return None


def abort_training(training, message):
    """Make every replica of *training* in this process raise at its next wait (run on the
    workers by ``Client.run`` when one of the training's workers left)."""
    with _MAILBOXES_LOCK:
        boxes = [box for (name, _), box in _MAILBOXES.items() if name == training]
    for box in boxes:
        box.fail(message)
