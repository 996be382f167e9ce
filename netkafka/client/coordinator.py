"""Coordinator discovery: which broker coordinates a transactional id (the transaction
coordinator) or a consumer group (the group coordinator), asked of any broker with
FindCoordinator and remembered until a request to it says it has moved.

An answer of COORDINATOR_NOT_AVAILABLE (the coordinator's partition of
__transaction_state or __consumer_offsets has no leader yet: a first transaction
creates the topic) or COORDINATOR_LOAD_IN_PROGRESS, and a lost connection, are asked
again after a backoff until the caller's deadline (retry.ask_until).  A
request() to a coordinator that answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE,
or whose connection fails, is followed by forget(), and the next find() asks again.

Threads: find() blocks: callers' threads and the producer's transaction thread, never
an I/O thread (it would wait for itself).  The cache is guarded by _lock; lookups run
without it, so two threads may ask at once, and the later answer is kept.
"""
import threading

from netkafka import errors
from netkafka.client.retry import ask_until
from netkafka.protocol.find_coordinator import (
    GROUP, TRANSACTION, decode_find_coordinator_response, encode_find_coordinator_request,
)
from netkafka.protocol.framing import ApiKey, check_node_address

_KEY_TYPE_NAMES = {GROUP: "group", TRANSACTION: "transaction"}
# Answers after which the coordinator asked may not be the coordinator any more.
_COORDINATOR_MOVED = frozenset((errors.NotCoordinatorError.code,
                                errors.CoordinatorNotAvailableError.code))


class Coordinators:
    """Coordinator lookups, cached.

    Args:
        pool: the IOPool whose connections carry FindCoordinator.
        metadata: the Metadata cache (which brokers there are).
        retry_backoff: the RetryBackoff before asking again after a retriable answer.
    """

    def __init__(self, pool, metadata, retry_backoff):
        self._pool = pool  # immutable
        self._metadata = metadata  # immutable
        self._retry_backoff = retry_backoff  # immutable
        self._lock = threading.Lock()
        self._known = {}  # guarded by _lock: (key_type, key) -> BrokerConnection

    def find(self, key_type, key, deadline):
        """The connection to the coordinator of key (key_type TRANSACTION or GROUP),
        asking for it if it is not known.

        Raises:
            KafkaTimeoutError: no answer but retriable ones before deadline (the last
                one named).
            BrokerError: a broker refused for good (e.g. not authorized for the
                transactional id or the group).
        """
        with self._lock:
            conn = self._known.get((key_type, key))
        if conn is not None:
            return conn
        what = f"the {_KEY_TYPE_NAMES[key_type]} coordinator of {key!r}"
        conn = ask_until(deadline, f"{what} not found in time",
                         lambda remaining_s: self._ask(key_type, key, what, remaining_s),
                         self._retry_backoff)
        with self._lock:
            self._known[(key_type, key)] = conn
        return conn

    def request(self, key_type, key, deadline, timeout_s, what, api_key, encode, decode,
                error_of, max_api_version=None):
        """One request to the coordinator of key (found first if it is not known),
        answered without error; a coordinator that may have moved is forgotten.

        Args:
            deadline: the bound of finding the coordinator.
            timeout_s: the bound of the request.
            what: the request's name in errors, e.g. "OffsetFetch of group 'g'".
            encode: encode(correlation_id, client_id, version) frames the request.
            decode: decodes the answer.
            error_of: error_of(response, where) is the answer's error (a BrokerError
                whose message says where it came from) or None.

        Raises:
            KafkaError: the answer's error, or the connection's, or find()'s.  After
                NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection or a
                timed-out request the next call looks the coordinator up again.
        """
        conn = self.find(key_type, key, deadline)
        client_id = conn.config.client_id
        try:
            response = conn.call(api_key, lambda cid, version: encode(cid, client_id, version),
                                 decode, timeout_s, max_api_version=max_api_version)
            error = error_of(response, f"{what} from {conn.describe()}")
        except errors.KafkaError as exc:
            error = exc
        if error is None:
            return response
        if error.retriable and (getattr(error, "code", None) in _COORDINATOR_MOVED
                                or isinstance(error, (errors.KafkaConnectionError,
                                                      errors.KafkaTimeoutError))):
            self.forget(key_type, key, conn)
        raise error

    def known(self, key_type, key):
        """The connection to the coordinator of key as last found, or None: no request."""
        with self._lock:
            return self._known.get((key_type, key))

    def forget(self, key_type, key, conn):
        """The coordinator of key is not conn's broker (any more): the next find() asks.
        A newer answer than conn is kept."""
        with self._lock:
            if self._known.get((key_type, key)) is conn:
                del self._known[(key_type, key)]

    def _ask(self, key_type, key, what, timeout_s):
        conn = self._metadata.least_loaded_connection(timeout_s)
        client_id = conn.config.client_id
        response = conn.call(
            ApiKey.FIND_COORDINATOR,
            lambda cid, version: encode_find_coordinator_request(cid, client_id, version, key,
                                                                 key_type),
            decode_find_coordinator_response, timeout_s)
        if response.error_code:
            raise errors.error_for_code(
                response.error_code, f"FindCoordinator for {what} from {conn.describe()}"
                + (f": {response.error_message}" if response.error_message else ""))
        if response.key is not None and response.key != key:
            raise errors.ProtocolError(f"{conn.describe()} answered FindCoordinator for "
                                       f"{response.key!r}, not {key!r}")
        try:
            # Checked before the pool sees it: a negative id is a bootstrap connection's,
            # and a known id's connection would move to whatever address came with it.
            check_node_address(response.node_id, response.host, response.port)
        except errors.ProtocolError as exc:
            raise errors.ProtocolError(
                f"{conn.describe()} answered FindCoordinator for {what} with {exc}") from None
        return self._pool.connection(response.node_id, response.host, response.port)
