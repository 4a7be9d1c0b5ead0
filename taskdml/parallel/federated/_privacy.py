"""What keeps a silo's update private in federated training: secure aggregation and
client-level differential privacy.

**Secure aggregation** (Bonawitz et al. 2017, without the dropout recovery). Each silo makes
a Diffie-Hellman key pair (RFC 3526 group 14) in a task pinned to its own workers; only the
public keys travel. Every pair of silos ``i < j`` then shares a secret the aggregator cannot
compute, and per round derives from it a mask ``m_ij``: silo ``i`` adds ``+m_ij``, silo ``j``
adds ``-m_ij``. Updates are encoded in fixed point (``FRACTION_BITS`` fractional bits) as
integers modulo 2**64, and the masks are uniform modulo 2**64, so each masked update is
uniformly distributed on its own and the masks cancel *exactly* in the sum: the aggregator
learns the sum of the updates (to the fixed-point rounding) and nothing else about any one.

**Client-level differential privacy** (DP-FedAvg, McMahan et al. 2018). Each silo clips its
update (its model minus the round's global model) to L2 norm ``clip_norm`` and adds its share
of Gaussian noise; the shares add up to at least ``N(0, (noise_multiplier * clip_norm)**2)``
even when one silo's share is left out (a silo's own share can't be counted on to protect that
silo from the others), so each round is a Gaussian mechanism of sensitivity ``clip_norm`` on
the sum. The (ε, δ) over the rounds comes from ``dp-accounting``'s RDP accountant.

These are pure functions on arrays and integers: they run inside the silos' tasks and on the
coordinator, and are tested without a cluster.
"""

import dataclasses
import hashlib
import math
import secrets

import numpy as np

FRACTION_BITS = 24
_SCALE = float(2**FRACTION_BITS)
_LIMIT = float(2 ** (62 - FRACTION_BITS))  # |value| the fixed-point sum can hold with headroom

# RFC 3526, 2048-bit MODP group 14: a safe prime, generator 2.
_MODP_2048 = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
    "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
    "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
    "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
    "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
    "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)
_GENERATOR = 2


@dataclasses.dataclass(frozen=True)
class DifferentialPrivacy:
    """Client-level differential privacy for :func:`taskdml.parallel.train_federated`.

    Parameters
    ----------
    clip_norm : float
        ``C``: each silo's update (its model minus the global model of the round) is scaled
        down to this L2 norm if it is longer.
    noise_multiplier : float
        ``σ``: the sum of the clipped updates gets Gaussian noise of standard deviation
        ``σ C`` per coordinate (at least; see the module docstring).
    delta : float
        The δ the ε is reported for.

    Examples
    --------
    >>> from taskdml.parallel import DifferentialPrivacy
    >>> DifferentialPrivacy(clip_norm=1.0, noise_multiplier=1.1).delta
    1e-05
    """

    clip_norm: float
    noise_multiplier: float
    delta: float = 1e-5

    def __post_init__(self):
        for name in ("clip_norm", "noise_multiplier"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"DifferentialPrivacy.{name} must be a positive number, got {value!r}."
                )
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise ValueError(f"DifferentialPrivacy.delta must be in (0, 1), got {self.delta!r}.")


def dp_epsilon(noise_multiplier, rounds, delta):
    """The ε spent by ``rounds`` Gaussian mechanisms of noise multiplier ``noise_multiplier``
    (every silo takes part in every round), at ``delta``, by ``dp-accounting``'s RDP accountant.

    Parameters
    ----------
    noise_multiplier : float
    rounds : int
    delta : float

    Returns
    -------
    float

    Examples
    --------
    >>> from taskdml.parallel import dp_epsilon
    >>> round(dp_epsilon(noise_multiplier=2.0, rounds=10, delta=1e-5), 2)  # doctest: +SKIP
    9.32
    """
    try:
        import dp_accounting
    except ImportError as error:
        raise ImportError(
            "Differential privacy in train_federated needs the 'dp-accounting' package to "
            "account the privacy spent; install it with `pip install taskdml[federated]` "
            "(or `pip install dp-accounting`)."
        ) from error
    if rounds == 0:
        return 0.0
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier), int(rounds))
    return float(accountant.get_epsilon(delta))


# -- secure aggregation ------------------------------------------------------------------


def make_key_pair():
    """``(private, public)`` Diffie-Hellman keys; the private key never leaves its silo."""
    private = secrets.randbits(256) | 1
    return private, pow(_GENERATOR, private, _MODP_2048)


def public_key(key_pair):
    """The public half of a key pair (the only part the coordinator gathers)."""
    return key_pair[1]


def encode(values):
    """Float array -> fixed-point integers modulo 2**64 (uint64)."""
    values = np.asarray(values, dtype=np.float64)
    biggest = float(np.max(np.abs(values))) if values.size else 0.0
    if not math.isfinite(biggest) or biggest >= _LIMIT:
        raise ValueError(
            f"secure aggregation encodes updates in fixed point up to {_LIMIT:.3g} in absolute "
            f"value; got {biggest!r}. Scale the features or use fewer rows per silo."
        )
    return np.round(values * _SCALE).astype(np.int64).view(np.uint64)


def decode(encoded):
    """Fixed-point integers modulo 2**64 (uint64) -> float array."""
    return np.asarray(encoded, dtype=np.uint64).view(np.int64) / _SCALE


def pair_mask(shared_secret, context, size):
    """The mask two silos derive from their shared secret for one ``context`` (the round)."""
    digest = hashlib.sha256(shared_secret.to_bytes(256, "big") + repr(context).encode()).digest()
    generator = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "big")))
    return generator.bit_generator.random_raw(size).astype(np.uint64)


def mask(encoded, index, key_pair, public_keys, context):
    """Silo ``index``'s encoded update plus ``+m_ij`` for every ``j > index`` and ``-m_ij``
    for every ``j < index``, modulo 2**64.

    ``public_keys`` lists every silo's public key, in silo order; the pairwise secret is
    ``public_keys[j] ** private`` modulo the group's prime.
    """
    private = key_pair[0]
    masked = np.array(encoded, dtype=np.uint64, copy=True)
    for other, their_key in enumerate(public_keys):
        if other == index:
            continue
        shared = pow(their_key, private, _MODP_2048)
        pair = (min(index, other), max(index, other))
        pad = pair_mask(shared, (context, pair), masked.size)
        masked = masked + pad if other > index else masked - pad  # wraps modulo 2**64
    return masked


def aggregate(masked_updates):
    """The sum modulo 2**64 of the masked updates: the masks cancel, the updates add."""
    total = np.zeros_like(np.asarray(masked_updates[0], dtype=np.uint64))
    for update in masked_updates:
        total = total + np.asarray(update, dtype=np.uint64)
    return decode(total)


# -- differential privacy ----------------------------------------------------------------


def clip(update, clip_norm):
    """*update* scaled down to L2 norm ``clip_norm`` if longer (a new array)."""
    update = np.asarray(update, dtype=np.float64)
    norm = float(np.linalg.norm(update))
    return update * (clip_norm / norm) if norm > clip_norm else update.copy()


def noise_share(size, dp, n_silos, seed):
    """One silo's Gaussian noise: variance ``(σC)² / max(n_silos - 1, 1)``, so that the
    shares of any ``n_silos - 1`` silos already add up to ``(σC)²``."""
    scale = dp.noise_multiplier * dp.clip_norm / math.sqrt(max(n_silos - 1, 1))
    return np.random.default_rng(seed).normal(0.0, scale, size=size)
