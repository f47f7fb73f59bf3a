"""The example database a campaign saves its examples to and replays them from (--db or the setting db): a directory,
shared by copying or syncing it, or a Redis that many machines share live (SharedDatabase: Redis errors are one
warning line, not an exception), multiplexed with a local directory; and each cell's own part of it (CellDatabase,
database_key)."""

import hashlib
import importlib.metadata
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, MultiplexedDatabase

from ..model.settings import get as setting


def configured(path=None):
    """The example database asked for: `path` (--db), else the setting db (docs/settings.md: `--set db=...`,
    ``[tool.difftest] db`` in pyproject.toml), else None."""
    return path or setting("db") or None


def database(path=None, namespace="pytest", local=None):
    """The example database (configured(path); None keeps Hypothesis' profile default). A directory, shared
    by copying or syncing it; or redis://HOST:PORT[/N], a Redis that many machines share live, multiplexed with
    the local directory `local` (default .hypothesis/examples): every example is saved to both, a fetch reads
    both, and the campaign goes on with the local one alone when Redis is unreachable (SharedDatabase).
    Redis keys are namespaced difftest:<version>:<namespace>: (the implementation's name in a campaign)."""
    path = configured(path)
    if not path:
        return None
    if not is_redis(path):
        return DirectoryBasedExampleDatabase(path)
    local = DirectoryBasedExampleDatabase(local or Path(".hypothesis") / "examples")
    return MultiplexedDatabase(local, SharedDatabase(path, namespace))


def is_redis(path):
    return str(path).startswith(("redis://", "rediss://"))


def project_version():
    try:
        return importlib.metadata.version("moe-difftest")
    except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
        return "unknown"


def redis_prefix(namespace):
    return f"difftest:{project_version()}:{namespace}:".encode()


class SharedDatabase(ExampleDatabase):
    """hypothesis.extra.redis.RedisExampleDatabase whose Redis errors (unreachable, killed, timed out) are one
    warning line per process and URL instead of an exception: while Redis is down its part of every call is
    skipped for REDIS_RETRY_S seconds, then tried again. The local half of the MultiplexedDatabase keeps every
    example meanwhile; examples found then reach Redis when a later campaign saves them again."""

    def __init__(self, url, namespace):
        super().__init__()
        from hypothesis.extra.redis import RedisExampleDatabase

        self.url, self.namespace = url, namespace
        self.db = RedisExampleDatabase(redis_client(url), key_prefix=redis_prefix(namespace),
                                       expire_after=timedelta(days=REDIS_EXPIRE_DAYS))

    def __repr__(self):
        return f"SharedDatabase({self.url!r}, {self.namespace!r})"

    def __eq__(self, other):
        return isinstance(other, SharedDatabase) and (self.url, self.namespace) == (other.url, other.namespace)

    def _call(self, f, default=None):
        from redis.exceptions import RedisError

        if time.monotonic() < _REDIS_DOWN.get(self.url, 0.0):
            return default
        try:
            return f()
        except RedisError as e:
            redis_down(self.url, e)
            return default

    def fetch(self, key):
        yield from self._call(lambda: list(self.db.fetch(key)), [])

    def save(self, key, value):
        self._call(lambda: self.db.save(key, value))

    def delete(self, key, value):
        self._call(lambda: self.db.delete(key, value))

    def move(self, src, dest, value):
        self._call(lambda: self.db.move(src, dest, value))


REDIS_EXPIRE_DAYS = 8  # Hypothesis' default: a key not touched by any campaign for 8 days expires
REDIS_RETRY_S = 30.0
_REDIS_DOWN = {}  # url -> time.monotonic() until which Redis is not tried again
_REDIS_WARNED = set()  # urls whose failure was reported (by this process or, for a worker, by its parent)
_REDIS_CLIENTS = {}


def redis_client(url):
    """One client (connection pool) per URL and process; short timeouts, so a lost Redis costs seconds."""
    if url not in _REDIS_CLIENTS:
        try:
            import redis
        except ImportError:
            raise ValueError(f"{url}: the redis client is not installed (pip install 'moe-difftest[redis]')") from None
        try:
            _REDIS_CLIENTS[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        except ValueError as e:
            raise ValueError(f"{url}: {e}") from None
    return _REDIS_CLIENTS[url]


def redis_down(url, error=None):
    """Mark Redis down for REDIS_RETRY_S seconds; the first time, one warning line on stderr (none without an
    error: a campaign's worker whose parent has warned already)."""
    _REDIS_DOWN[url] = time.monotonic() + REDIS_RETRY_S
    if error is None:
        _REDIS_WARNED.add(url)
    elif url not in _REDIS_WARNED:
        _REDIS_WARNED.add(url)
        if not _first_to_warn():
            return
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"difftest: warning: Redis {url} unreachable ({reason}): examples go to the local database only "
              f"(retried every {REDIS_RETRY_S:g} s)", file=sys.stderr, flush=True)


def warn_once_per(marker):
    """Processes that share `marker` (a path: a campaign's workers and their parent) warn once between them."""
    global _REDIS_MARKER
    _REDIS_MARKER = marker


_REDIS_MARKER = None


def first_to_claim(marker):
    """True for the one process, of those sharing `marker` (a path), that creates it first (an exclusive create)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:  # an unwritable run directory: better twice than never
        pass
    return True


def _first_to_warn():
    return _REDIS_MARKER is None or first_to_claim(_REDIS_MARKER)


def redis_reachable(url):
    """Ping Redis once (warning as above when it does not answer); True if it answered."""
    from redis.exceptions import RedisError

    try:
        return bool(redis_client(url).ping())
    except RedisError as e:
        redis_down(url, e)
        return False


class CellDatabase(ExampleDatabase):
    """One cell's part of an example database: every key Hypothesis uses is prefixed with a digest of the cell's
    database_key (through the public ExampleDatabase interface)."""

    def __init__(self, db, cell_key):
        super().__init__()
        self.db, self.prefix = db, hashlib.sha384(cell_key).hexdigest().encode() + b":"

    def __repr__(self):
        return f"CellDatabase({self.db!r}, {self.prefix.decode()})"

    def save(self, key, value):
        self.db.save(self.prefix + key, value)

    def fetch(self, key):
        yield from self.db.fetch(self.prefix + key)

    def delete(self, key, value):
        self.db.delete(self.prefix + key, value)

    def move(self, src, dest, value):
        self.db.move(self.prefix + src, self.prefix + dest, value)


def database_key(impl, op, impl_ref, configs, weight_seed=None):
    """The key of a cell's part of the example database (CellDatabase): saved examples replay only in the same
    cell and against the same fixed weights (a cell without a weight seed keeps the key it had before weight
    seeds existed)."""
    key = f"{impl.name}|{op}|{impl_ref}|{configs!r}"
    return (key if weight_seed is None else f"{key}|weights {weight_seed}").encode()
