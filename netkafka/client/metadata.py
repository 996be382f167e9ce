"""Cluster metadata: which broker leads which partition, kept fresh.

Bootstrap: the first Metadata request goes to the bootstrap addresses in
order, skipping any that cannot be reached; one answer is enough.  Later
requests go to any connection that is ready (or to a known broker).

The cache is refreshed every ``metadata_max_age_ms``, and sooner when someone
asks (request_update(): the sender does on NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION and failed requests; this module does when a
broker connection drops), never more often than ``retry_backoff_ms``.  Such a
refresh asks for every topic in use.

A new topic does not wait for that: it is asked for at once, in a request of
its own naming only the new topics (those added while a request is out go
together in the next one), so the first send to a topic costs one round trip
however many topics are known.  A request takes its topics when it is framed,
after the connection's setup: a fresh producer's first send rides on the
bootstrap request.  A topic whose answer is not usable yet (being created, no
leader) is asked for again, alone, after a backoff that starts at an eighth of
``retry_backoff_ms`` and doubles with each answer that still finds it so, up to
``retry_backoff_ms``: the broker answers the request that makes it create a topic at
once, saying UNKNOWN_TOPIC_OR_PARTITION (Kafka 4) or LEADER_NOT_AVAILABLE, and has
the topic's leader 30-70 ms later (one broker, measured), so a full
``retry_backoff_ms`` was most of a fresh producer's first send to a new topic (121 ms
median; 67 ms with this backoff; confluent-kafka 107 ms); a topic that stays
unusable (no such topic and no auto-creation, a lost leader) is asked for after
``retry_backoff_ms`` then, doubling with each answer (+-20% jitter), at most every
``retry_backoff_max_ms`` (KIP-580).  (The Java client backs off ``retry.backoff.ms``
and more, exponentially, after each answer; librdkafka asks once
at once, then from ``topic.metadata.refresh.fast.interval.ms``, exponentially.)  After
each answer the pool's connections follow the brokers' addresses and the listeners
(the sender) hear which partition leaders changed.

A request the cluster fails by refusing the client's credentials (a wrong password, a
deleted user: errors.refuses_credentials) is not retried on its own: the waits raise
the refusal at once, each wait that meets it standing asks once more (its connection's
reconnect backoff spaces those logins), and otherwise the next request is the periodic
one, ``metadata_max_age_ms`` after the refusal.

Re-bootstrap (KIP-899, ``metadata_recovery_strategy="rebootstrap"``): when no
connection is ready and every known broker's connection has failed since it was
last ready, the known brokers may all have moved (a cluster replaced behind its
bootstrap name): the next requests go to the bootstrap addresses again, as at
the start, until one answers.  The same happens at once when a broker answers a
Metadata request with REBOOTSTRAP_REQUIRED (KIP-1102, Metadata v13).  With "none"
(the default, as the Java 3.x client and kafka-python, which has no such setting)
only the known brokers are asked, however long they stay unreachable.  And with
"rebootstrap", when no Metadata request has been answered for
``metadata_recovery_rebootstrap_trigger_ms`` (KIP-1102; the known brokers may accept
connections and still give no usable answer).

Threads: refreshes are driven on I/O thread 0 (the "metadata thread"); the
answer is handled on the thread of the connection it came from.  Every field
shared between them and the callers is guarded by ``_lock``; callers wait on
``_changed``.  Lock order: ``_lock``, then the pool's, then a connection's
(_pick_connection looks at the pool's connections with ``_lock`` held); the
producer's accumulator lock comes before ``_lock`` (forget_topics).
"""
import copy
import logging
import re
import threading
import time
from typing import NamedTuple

from netkafka import errors
from netkafka._validate import check_choice, check_int
from netkafka.client.retry import RetryBackoff
from netkafka.errors import KafkaConnectionError, KafkaTimeoutError
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.metadata import (
    check_metadata_response, decode_metadata_response, encode_metadata_request,
)

METADATA_RECOVERY_STRATEGIES = ("none", "rebootstrap")
_log = logging.getLogger("netkafka.client.metadata")


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: object  # str or None


class PartitionInfo(NamedTuple):
    partition: int
    leader: int  # -1 while there is no leader
    leader_epoch: int
    replicas: tuple
    isr: tuple
    error_code: int


class TopicInfo(NamedTuple):
    name: str
    error_code: int
    partitions: dict  # partition -> PartitionInfo
    topic_id: object  # uuid.UUID (Metadata v10+; Produce v13 names topics by it) or None


class ClusterSnapshot(NamedTuple):
    """One Metadata answer, immutable once built."""

    brokers: dict  # node_id -> BrokerInfo
    topics: dict  # name -> TopicInfo
    controller_id: int
    cluster_id: object  # str or None

    def leader(self, topic, partition):
        """The BrokerInfo leading topic/partition, or None."""
        info = self.topics.get(topic)
        if info is None:
            return None
        part = info.partitions.get(partition)
        if part is None or part.leader < 0:
            return None
        return self.brokers.get(part.leader)


def request_metadata(conn, topics, allow_auto_topic_creation=True):
    """Sends one Metadata request for topics on conn, at the version negotiated
    with that broker.  Returns a Future of the decoded answer.

    topics: a list ([] asks for brokers only), or a callable returning one,
    called when the request is framed (after the connection's setup), so that
    topics added meanwhile go in the same request."""
    ask = topics if callable(topics) else (lambda fixed=list(topics): fixed)
    client_id = conn.config.client_id
    return conn.request(
        ApiKey.METADATA,
        lambda cid, version: encode_metadata_request(
            cid, client_id, version, ask(), allow_auto_topic_creation),
        decode_metadata_response)


def parse_bootstrap_servers(servers):
    """'h1:p1,h2:p2' or a list of 'host:port' / (host, port) -> [(host, port)].

    Raises:
        ValueError: naming the entry that is not host:port.
    """
    if isinstance(servers, str):
        servers = [s for s in servers.split(",") if s.strip()]
    result = []
    for entry in servers:
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            host, port = entry
        elif isinstance(entry, str):
            host, sep, port = entry.strip().rpartition(":")
            if not sep:
                host, port = entry.strip(), 9092  # Kafka's default port
        else:
            raise ValueError(f"bootstrap_servers entry {entry!r} is not 'host:port'")
        host = str(host).strip("[]")  # [::1]:9092
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise ValueError(
                f"bootstrap_servers entry {entry!r}: port {port!r} is not a number") from None
        if not host or not 0 < port < 65536:
            raise ValueError(f"bootstrap_servers entry {entry!r} is not 'host:port'")
        result.append((host, port))
    if not result:
        raise ValueError("bootstrap_servers is empty: give at least one 'host:port'")
    return result


def _stale(code):
    """True for a topic or partition error code after which the answer is
    incomplete and worth asking again (the Java client's
    InvalidMetadataException codes, e.g. LEADER_NOT_AVAILABLE while a topic
    is being created)."""
    return code != errors.NO_ERROR and errors.ERROR_CODES.get(code, ("", False, False))[2]


class Metadata:
    """The metadata cache and its refresher.

    Args:
        pool: the IOPool whose connections carry the requests.
        bootstrap_servers: 'host:port,...' or a list; any reachable one will do.
        metadata_max_age_ms: refresh at least this often. Default 300000.
        retry_backoff_ms: at most one refresh per this interval. Default 100.
        retry_backoff_max_ms: how far the wait before asking again for a topic that
            stays unusable grows. Default 1000.
        allow_auto_topic_creation: asked of the broker (which also needs
            auto.create.topics.enable). Default True, as the Java producer.
        metadata_recovery_strategy: "none" or "rebootstrap" (KIP-899, see the
            module's story). Default "none", as the Java 3.x client.
        metadata_recovery_rebootstrap_trigger_ms: with "rebootstrap", re-bootstrap
            also when no Metadata request has been answered for this long (KIP-1102).
            Default 300000, as the Java client.
    """

    def __init__(self, pool, bootstrap_servers, metadata_max_age_ms=300000,
                 retry_backoff_ms=100, retry_backoff_max_ms=1000,
                 allow_auto_topic_creation=True, metadata_recovery_strategy="none",
                 metadata_recovery_rebootstrap_trigger_ms=300000):
        check_int("metadata_max_age_ms", metadata_max_age_ms, 1)
        check_int("retry_backoff_ms", retry_backoff_ms, 0)
        check_int("retry_backoff_max_ms", retry_backoff_max_ms, 0)
        check_choice("metadata_recovery_strategy", metadata_recovery_strategy,
                     METADATA_RECOVERY_STRATEGIES)
        check_int("metadata_recovery_rebootstrap_trigger_ms",
                  metadata_recovery_rebootstrap_trigger_ms, 0)
        self._rebootstrap = metadata_recovery_strategy == "rebootstrap"  # immutable
        # Immutable: how long Metadata requests may go unanswered before re-bootstrap.
        self._rebootstrap_trigger_ns = metadata_recovery_rebootstrap_trigger_ms * 1_000_000
        self._pool = pool  # immutable
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)  # immutable
        self.metadata_max_age_ms = metadata_max_age_ms  # immutable
        self.retry_backoff_ms = retry_backoff_ms  # immutable
        self._retry_backoff = RetryBackoff(retry_backoff_ms, retry_backoff_max_ms)  # immutable
        self._auto_create = bool(allow_auto_topic_creation)  # immutable
        self._thread = pool.thread_for(0)  # immutable: drives refreshes

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every answer or failure
        self._snapshot = None  # guarded by _lock: latest ClusterSnapshot
        self._topics = set()  # guarded by _lock: topics the producer uses
        self._unrequested = set()  # guarded by _lock: of _topics, in no request yet
        # Guarded by _lock: of _topics, asked for but not usable yet (not in the
        # answer, being created, a partition without leader) -> (when it is due to be
        # asked again, alone (monotonic ns), answers so far that found it so): see
        # _retry_delay_ns.
        self._incomplete = {}
        self._need_update = True  # guarded by _lock: a refresh of every topic is due
        self._requests = 0  # guarded by _lock: request_update() calls so far
        self._requests_at_fetch = 0  # guarded by _lock: _requests when the fetch went out
        self._full_fetch = False  # guarded by _lock: the request out asks for every topic
        # Guarded by _lock: the topics the request out asked for, set when it is
        # framed (empty until then).
        self._asked = frozenset()
        self._fetching = False  # guarded by _lock: a Metadata request is out
        self._last_attempt_ns = None  # guarded by _lock: when the last request ended
        self._last_success_ns = 0  # guarded by _lock: when the last full refresh ended
        # Guarded by _lock: when a Metadata request last met a refusal of the client's
        # credentials (errors.refuses_credentials); the periodic refresh counts from it
        # as from a success (see _on_answer_failed).
        self._refused_ns = 0
        # Guarded by _lock: when the first Metadata request since the last answered one
        # went out (None: the last one was answered), for the re-bootstrap trigger.
        self._unanswered_since_ns = None
        self._timer_at_ns = None  # guarded by _lock: refresh already scheduled then
        self._next_candidate = 0  # guarded by _lock: round robin over addresses
        # Guarded by _lock: asking the bootstrap addresses again, every known broker
        # being unreachable (re-bootstrap), until one answers; and how often it began.
        self._rebootstrapping = False
        self._rebootstraps = 0
        self._errors = {}  # guarded by _lock: address -> last error there
        # Guarded by _lock: why the last Metadata request failed (e.g. no answer within
        # request_timeout_ms from a broker busy collecting garbage), None once one is
        # answered: a wait for a topic that times out says so rather than only "not in
        # the last answer".
        self._last_failure = None
        # Guarded by _lock: an error that waiting cannot fix -- an authentication
        # failure (a certificate, a password) or a broker netkafka cannot use at all
        # (IncompatibleBrokerError, e.g. Kafka 4.x with a legacy api_version) --
        # cleared when some broker answers a Metadata request.  The waits raise it at
        # once rather than wait out max_block_ms (the Java client's metadata does the
        # same with AuthenticationException).
        self._fatal_error = None
        self._updates = 0  # guarded by _lock: answers received so far
        self._closed = False  # guarded by _lock
        self._listeners = []  # guarded by _lock: on_metadata(snapshot, moved)

        pool.add_listener(self)
        self._thread.call_soon(self._refresh)

    # ------------------------------------------------------------------
    # Any thread.

    def snapshot(self):
        with self._lock:
            return self._snapshot

    def add_listener(self, listener):
        """listener.on_metadata(snapshot, moved): moved is the set of (topic,
        partition) whose leader changed.  Called after each answer, on an I/O
        thread, without any lock held."""
        with self._lock:
            self._listeners.append(listener)

    def request_update(self):
        """Asks for a refresh as soon as retry_backoff_ms allows."""
        with self._lock:
            if self._closed:
                return
            self._need_update = True
            self._requests += 1
        self._thread.call_soon(self._refresh)

    def add_topic(self, topic):
        """Includes topic in every refresh from now on; a new one is asked for at once.

        Raises:
            InvalidTopicError: the name breaks Kafka's rule (check_topic_name), which
                also keeps out every string a request cannot carry: refused before it
                joins the set, which every later Metadata request encodes.
        """
        check_topic_name(topic)
        with self._lock:
            if topic in self._topics or self._closed:
                return
            self._topics.add(topic)
            self._unrequested.add(topic)
        self._thread.call_soon(self._refresh)

    def forget_topics(self, topics):
        """Stops asking for topics (a set: the producer's idle ones,
        metadata_max_idle_ms) and drops them from the cache: a refresh no longer names
        them (with auto-creation on, it would create one someone deleted), and a wait
        for one asks for it again, at once, as for a new topic."""
        with self._lock:
            for topic in topics:
                self._forget_topic_locked(topic)
            if self._snapshot is not None:
                self._snapshot = self._snapshot._replace(topics={
                    name: info for name, info in self._snapshot.topics.items()
                    if name not in topics})

    def topic_id(self, topic):
        """The topic's id from the cache, or None."""
        with self._lock:
            snapshot = self._snapshot
        info = None if snapshot is None else snapshot.topics.get(topic)
        return None if info is None else info.topic_id

    def leader_id(self, topic, partition):
        """Node id leading topic/partition in the cache, or None."""
        with self._lock:
            snapshot = self._snapshot
        if snapshot is None:
            return None
        broker = snapshot.leader(topic, partition)
        return None if broker is None else broker.node_id

    def leader_epoch(self, topic, partition):
        """The leader epoch of topic/partition in the cache; -1 if it knows none (or
        the broker's Metadata answers are older than v7, which carry none)."""
        with self._lock:
            snapshot = self._snapshot
        info = None if snapshot is None else snapshot.topics.get(topic)
        part = None if info is None else info.partitions.get(partition)
        return -1 if part is None else part.leader_epoch

    def awaits_leader(self, topic, partition):
        """Whether the cache knows topic/partition but no leader of it: the partition
        has none, or the topic is gone (a retriable error: deleted, perhaps being
        created again) -- what leader_if_any() answers None for without waiting.  Not a
        partition the topic lacks, nor a topic the cache has no answer about."""
        with self._lock:
            snapshot = self._snapshot
        info = None if snapshot is None else snapshot.topics.get(topic)
        if info is None:
            return False
        if _stale(info.error_code):
            return True
        part = info.partitions.get(partition)
        return part is not None and snapshot.leader(topic, partition) is None

    def wait_for_bootstrap(self, timeout_s):
        """Blocks until the first answer; raises KafkaTimeoutError naming every
        address tried and its error, or IncompatibleBrokerError (wait_for_topic)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            found_standing = True
            while self._snapshot is None:
                self._raise_fatal_error_locked(found_standing)
                found_standing = False
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    raise KafkaTimeoutError(
                        f"no metadata from any bootstrap server within {timeout_s * 1000:.0f} ms"
                        f" (tried: {self._describe_errors()})")
                self._changed.wait(remaining)
            return self._snapshot

    def least_loaded_connection(self, timeout_s):
        """A connection to a known broker for a request any broker answers
        (InitProducerId of an idempotent producer, FindCoordinator): a ready one
        before one still connecting, the least outbound bytes first.  Waits up to
        timeout_s for the first metadata."""
        snapshot = self.wait_for_bootstrap(timeout_s)
        connections = [self._pool.connection(b.node_id, b.host, b.port)
                       for b in sorted(snapshot.brokers.values())]
        return min(connections, key=lambda c: (c.state != "ready", c.outbound_bytes))

    def wait_for_topic(self, topic, timeout_s):
        """The TopicInfo of topic once the cache knows its partitions, whether or not
        each has a leader (as the Java client: a partition whose replicas are all down
        has none, and records for the others need not wait for it; those for it wait
        in the sender, parked, for a leader or their delivery timeout); raises
        KafkaTimeoutError naming the topic and the reason, or
        at once: InvalidTopicError for a name Kafka's rule or the broker refuses,
        TopicAuthorizationFailedError, IncompatibleBrokerError once a broker
        turned out unusable."""
        self.add_topic(topic)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            found_standing = True
            while True:
                info = None if self._snapshot is None else self._snapshot.topics.get(topic)
                if info is not None and info.error_code == errors.NO_ERROR and info.partitions:
                    return info
                self._raise_fatal_error_locked(found_standing)
                found_standing = False
                if info is not None and info.error_code in _REFUSED_TOPIC:
                    # As the Java client: neither the name nor the ACLs change by
                    # waiting.  Later refreshes need not ask for it again.
                    self._forget_topic_locked(topic)
                    raise errors.error_for_code(
                        info.error_code, f"topic {topic!r}: {_REFUSED_TOPIC[info.error_code]}")
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    break
                self._changed.wait(remaining)
            if self._snapshot is None:
                reason = self._describe_errors()
            elif self._last_failure is not None:
                reason = (f"{_topic_state(info)}; the last Metadata request failed: "
                          f"{self._last_failure}")
            else:
                reason = _topic_state(info)
        raise KafkaTimeoutError(
            f"topic {topic!r} not available in metadata after {timeout_s * 1000:.0f} ms: "
            f"{reason}")

    def topic_answer(self, topic, timeout_s):
        """The TopicInfo of the cache's answer about topic, whatever its error code
        (wait_for_topic waits past UNKNOWN_TOPIC_OR_PARTITION, as for a topic being
        created); None if none came within timeout_s."""
        self.add_topic(topic)
        with self._changed:
            self._changed.wait_for(
                lambda: self._closed or (self._snapshot is not None
                                         and topic in self._snapshot.topics), timeout_s)
            return None if self._snapshot is None else self._snapshot.topics.get(topic)

    def fresh_topic_answer(self, topic, info, timeout_s):
        """The cache's next answer about topic after info (the TopicInfo it holds): a
        Metadata request is asked for now.  None if none came within timeout_s."""
        self.request_update()
        with self._changed:
            self._changed.wait_for(
                lambda: self._closed or self._snapshot.topics.get(topic) is not info,
                timeout_s)
            fresh = self._snapshot.topics.get(topic)
        return None if fresh is info else fresh

    def wait_for_partition(self, topic, partition, timeout_s):
        """The TopicInfo of topic once the cache knows it has partition, whether or not
        that has a leader (wait_for_topic).  A partition beyond the cached answer's
        count gets one fresh answer about the topic before it is refused: partitions may
        have been added since (the Java client's send() asks again too).

        Raises:
            KafkaTimeoutError, InvalidTopicError, ...: as wait_for_topic; also no fresh
                answer within timeout_s.
            NoSuchPartitionError: the fresh answer has no such partition either.
        """
        deadline = time.monotonic() + timeout_s
        info = self.wait_for_topic(topic, timeout_s)
        if partition in info.partitions:
            return info
        self.request_update()
        with self._changed:
            answered = self._changed.wait_for(
                lambda: self._closed or self._snapshot.topics.get(topic) is not info,
                max(0.0, deadline - time.monotonic()))
        if not answered:
            raise KafkaTimeoutError(
                f"topic {topic!r} had {len(info.partitions)} partitions, no {partition}, "
                f"and no fresh metadata answer came within {timeout_s * 1000:.0f} ms")
        info = self.wait_for_topic(topic, max(0.0, deadline - time.monotonic()))
        _check_partition(topic, partition, info)
        return info

    def leader_for(self, topic, partition, timeout_s):
        """BrokerInfo of the leader of topic/partition, waiting up to timeout_s
        for metadata.

        Raises:
            KafkaTimeoutError: no leader known within timeout_s (names why).
            NoSuchPartitionError: the topic has no such partition (an
                IllegalArgumentError, and a ValueError as kafka-python's send() raises
                for it).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                snapshot, updates = self._snapshot, self._updates
            broker = None if snapshot is None else snapshot.leader(topic, partition)
            if broker is not None:
                return broker
            info = self.wait_for_topic(topic, max(0.0, deadline - time.monotonic()))
            _check_partition(topic, partition, info)
            # The partition names a leader missing from the answer's broker
            # list (or the cache moved on meanwhile): wait for the next answer.
            self.request_update()
            with self._changed:
                self._changed.wait_for(lambda: self._updates != updates or self._closed,
                                       max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"no leader for {topic}-{partition} after {timeout_s * 1000:.0f} ms")

    def leader_if_any(self, topic, partition, timeout_s):
        """BrokerInfo of the leader of topic/partition, or None while the cache knows of
        none: the partition has no leader (its replicas down, an election under way),
        or the topic is gone (deleted; perhaps being created again).  Waits up to
        timeout_s only for a topic the cache has no answer about yet, not for a leader.
        The sender's look-up: its batch for such a partition waits among the unrouted,
        up to its delivery timeout, as in the Java client; this cache asks for the topic
        again meanwhile, as for any topic whose answer is not usable (_incomplete).

        Raises:
            KafkaTimeoutError, InvalidTopicError, ...: as wait_for_topic.
            NoSuchPartitionError: as leader_for.
        """
        with self._lock:
            snapshot = self._snapshot
        broker = None if snapshot is None else snapshot.leader(topic, partition)
        if broker is not None:
            return broker
        info = None if snapshot is None else snapshot.topics.get(topic)
        if info is not None and _stale(info.error_code):
            return None  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...
        info = self.wait_for_topic(topic, timeout_s)
        _check_partition(topic, partition, info)
        return self.snapshot().leader(topic, partition)

    @property
    def updates(self):
        """Number of Metadata answers applied so far."""
        with self._lock:
            return self._updates

    @property
    def rebootstraps(self):
        """Times the known brokers were all unreachable and the bootstrap addresses were
        asked again (metadata_recovery_strategy="rebootstrap")."""
        with self._lock:
            return self._rebootstraps

    def close(self):
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    # ------------------------------------------------------------------
    # Connection events (I/O threads).

    def on_ready(self, conn):
        pass

    def on_failure(self, conn, error, was_ready):
        if isinstance(error, errors.IncompatibleBrokerError):
            with self._changed:
                self._fatal_error = error
                self._changed.notify_all()
        # A broker that dropped, or that cannot be reached, may have lost its leadership:
        # look again.  Failed connection attempts count too: a SIGKILLed leader is replaced
        # only when the controller fences it, seconds later, so the refresh its dropped
        # connection asked for may still name it -- and its batches would wait for it until
        # delivery_timeout_ms.  A connection retries only while it has work, and refreshes
        # are spaced by retry_backoff_ms: at most one per reconnect attempt (the Java client
        # also asks again at every disconnect).
        # A refusal of the client's credentials is no sign of a move: asking would only
        # reconnect to meet it again (the waits raise it meanwhile).
        if conn.node_id >= 0 and not errors.refuses_credentials(error):
            self.request_update()

    # ------------------------------------------------------------------
    # The metadata thread.

    def _refresh(self):
        """Sends a Metadata request if one is due and none is out; else makes
        sure this runs again when the next one is due.  Due: at once for new
        topics; after retry_backoff_ms for a refresh someone asked for; when the
        first incomplete topic is due (_retry_delay_ns); after metadata_max_age_ms
        anyway."""
        now_ns = time.monotonic_ns()
        with self._lock:
            if self._closed or self._fetching:
                return
            backoff_due_ns = (now_ns if self._last_attempt_ns is None
                              else self._last_attempt_ns + self.retry_backoff_ms * 1_000_000)
            age_due_ns = (max(self._last_success_ns, self._refused_ns)
                          + self.metadata_max_age_ms * 1_000_000)
            if self._unrequested:
                due_ns = now_ns
            else:
                due_ns = backoff_due_ns if self._need_update else age_due_ns
                if self._incomplete:
                    due_ns = min(due_ns, min(due for due, _ in self._incomplete.values()))
            if due_ns > now_ns:
                if self._timer_at_ns is None or self._timer_at_ns > due_ns:
                    self._timer_at_ns = due_ns
                    self._thread.call_later((due_ns - now_ns) / 1e6, self._on_timer)
                return
            conn = self._pick_connection()
            if conn is None:
                return  # pool closed
            full = backoff_due_ns <= now_ns and (self._need_update or age_due_ns <= now_ns)
            self._fetching = True
            if self._unanswered_since_ns is None:
                self._unanswered_since_ns = now_ns
            self._full_fetch = full
            self._asked = frozenset()
            if full:
                self._requests_at_fetch = self._requests
        request_metadata(conn, lambda: self._topics_to_ask(full),
                         self._auto_create).add_done_callback(
            lambda f: self._on_answer(conn, f))

    def _topics_to_ask(self, full):
        """The request's topics, when it is framed (on its connection's thread):
        every topic for a full refresh, else the new ones and the incomplete ones
        that are due."""
        now_ns = time.monotonic_ns()
        with self._lock:
            if full:
                asked = frozenset(self._topics)
            else:
                asked = frozenset(self._unrequested).union(
                    topic for topic, (due, _) in self._incomplete.items() if due <= now_ns)
            self._unrequested.clear()
            self._asked = asked
        return sorted(asked)

    def _on_timer(self):
        with self._lock:
            self._timer_at_ns = None
        self._refresh()

    def _pick_connection(self):
        """Called with _lock held: a ready connection if any, else the next
        known broker, else the next bootstrap address."""
        try:
            if (self._rebootstrap and not self._rebootstrapping
                    and self._snapshot is not None and self._unanswered_since_ns is not None
                    and time.monotonic_ns() - self._unanswered_since_ns
                    >= self._rebootstrap_trigger_ns):
                # The known brokers may connect and still never give a usable answer (a
                # broker re-purposed for another cluster): KIP-1102's trigger.  Checked
                # when the next request is picked, after the one out has ended.
                self._start_rebootstrap_locked(
                    f"no Metadata request answered for "
                    f"{self._rebootstrap_trigger_ns // 1_000_000} ms")
            # While re-bootstrapping only bootstrap connections count: a known broker that
            # answered REBOOTSTRAP_REQUIRED is still ready, but not to be asked.
            ready = [c for c in self._pool.connections() if c.state == "ready"
                     and not (self._rebootstrapping and c.node_id >= 0)]
            if ready:
                ready.sort(key=lambda c: c.node_id < 0)  # known brokers first
                return ready[0]
            if (self._snapshot is not None and self._snapshot.brokers
                    and not self._rebootstrap_due_locked()):
                brokers = sorted(self._snapshot.brokers.values())
                broker = brokers[self._next_candidate % len(brokers)]
                self._next_candidate += 1
                return self._pool.connection(broker.node_id, broker.host, broker.port)
            index = self._next_candidate % len(self._bootstrap)
            self._next_candidate += 1
            host, port = self._bootstrap[index]
            return self._pool.connection(-1 - index, host, port)
        except KafkaConnectionError:
            return None  # the pool is closed

    def _rebootstrap_due_locked(self):
        """With "rebootstrap": True once every known broker's connection has failed since
        it was last ready (a broker never tried yet is not unreachable), and until the
        bootstrap addresses answer."""
        if not self._rebootstrap or self._rebootstrapping:
            return self._rebootstrapping
        connections = [self._pool.get(node_id) for node_id in self._snapshot.brokers]
        if not all(c is not None and c.consecutive_failures for c in connections):
            return False
        self._start_rebootstrap_locked("every known broker ({}) is unreachable".format(
            ", ".join(c.describe() for c in connections)))
        return True

    def _start_rebootstrap_locked(self, why):
        self._rebootstrapping = True
        self._rebootstraps += 1
        self._next_candidate = 0
        _log.warning("%s: asking bootstrap_servers for metadata again "
                     "(metadata_recovery_strategy='rebootstrap')", why)

    def _on_answer(self, conn, future):
        with self._lock:
            if self._closed:  # an answer that arrives during close(): nobody waits for it
                self._fetching = False
                return
        error = future.exception()
        now_ns = time.monotonic_ns()
        if error is not None:
            self._on_answer_failed(conn, error, now_ns)
            return
        response = future.result()
        if response.error_code:
            # A top-level error (v13+): no usable answer.  REBOOTSTRAP_REQUIRED (KIP-1102)
            # is the broker saying that the cluster the client knows is not the one to ask:
            # with "rebootstrap", the bootstrap addresses are asked next, as when every known
            # broker is unreachable; with "none" the answer just fails, as any other.
            error = errors.error_for_code(response.error_code,
                                          f"Metadata answer from {conn.describe()}")
            if isinstance(error, errors.RebootstrapRequiredError) and self._rebootstrap:
                with self._lock:
                    if not self._rebootstrapping:
                        self._start_rebootstrap_locked(
                            f"{conn.describe()} answered REBOOTSTRAP_REQUIRED")
            self._on_answer_failed(conn, error, now_ns)
            return
        try:
            check_metadata_response(response)
        except errors.ProtocolError as exc:
            # Well framed, so the connection and the requests in flight on it stay;
            # only this answer is refused.
            self._on_answer_failed(conn, errors.ProtocolError(
                f"Metadata answer from {conn.describe()} refused: {exc}"), now_ns)
            return
        with self._lock:
            old, full = self._snapshot, self._full_fetch
        snapshot = _snapshot_from(response, None if full else old, old)
        try:
            for broker in snapshot.brokers.values():
                if self._pool.get(broker.node_id) is not None:
                    self._pool.connection(broker.node_id, broker.host, broker.port)
        except KafkaConnectionError:
            return  # the pool closed meanwhile (the producer's close())
        with self._changed:
            self._snapshot = snapshot
            self._updates += 1
            self._fetching = False
            self._fatal_error = None  # some broker answers: waiting is not in vain
            self._last_failure = None
            self._rebootstrapping = False
            self._unanswered_since_ns = None
            self._last_attempt_ns = now_ns
            self._next_candidate = 0
            if full:
                self._last_success_ns = now_ns
                # Again soon if someone asked while this fetch was out (a leader moved).
                self._need_update = self._requests != self._requests_at_fetch
            for topic in self._asked & self._topics:
                if _usable(snapshot.topics.get(topic)):
                    self._incomplete.pop(topic, None)
                else:
                    answers = self._incomplete.get(topic, (0, 0))[1]
                    self._incomplete[topic] = (now_ns + self._retry_delay_ns(answers),
                                               answers + 1)
            self._changed.notify_all()
            listeners = list(self._listeners)
        moved = _moved_partitions(old, snapshot, response.topics)
        for listener in listeners:
            listener.on_metadata(snapshot, moved)
        self._refresh()

    def _on_answer_failed(self, conn, error, now_ns):
        if isinstance(error, errors.ProtocolError):
            _log.warning("%s; the metadata cache keeps its last good answer", error)
        with self._changed:
            self._fetching = False
            self._last_attempt_ns = now_ns
            self._errors[conn.address] = self._last_failure = str(error)
            if errors.refuses_credentials(error):
                # Asked again now, or at every retry_backoff_ms, the cluster refuses
                # again: a producer whose topics stay known reconnected for as long as
                # it lived, each attempt a failed login (account lockouts count them).
                # Nothing is asked again until a caller needs metadata (a send meeting
                # this error, a new topic, request_update()) or metadata_max_age_ms
                # has passed; and then no sooner than the connection's reconnect
                # backoff, which grows with each refusal.  Nor is the next address
                # tried at once: the cluster's other brokers know the same credentials.
                self._fatal_error = error
                self._refused_ns = now_ns
                self._need_update = False
                self._incomplete.clear()
            else:
                self._need_update = True
                # Asked, or about to be: again after retry_backoff_ms, not at once (a
                # broker that fails every request must not be asked in a loop).
                for topic in self._asked | self._unrequested:
                    answers = self._incomplete.get(topic, (0, 0))[1]
                    self._incomplete[topic] = (now_ns + self.retry_backoff_ms * 1_000_000,
                                               answers)
                # The next address is tried at once while some address is untried
                # in this round; retry_backoff_ms applies after that.
                if self._next_candidate % max(1, self._candidate_count()) != 0:
                    self._last_attempt_ns = None
            self._unrequested.clear()
            self._changed.notify_all()
        self._refresh()

    def _forget_topic_locked(self, topic):
        self._topics.discard(topic)
        self._unrequested.discard(topic)
        self._incomplete.pop(topic, None)

    def _retry_delay_ns(self, answers):
        """How long an incomplete topic waits before it is asked again, after the
        answers-th answer (from 0) that found it incomplete: retry_backoff_ms / 8,
        then / 4, / 2, then retry_backoff_ms doubling up to retry_backoff_max_ms (the
        module's story says why)."""
        if answers < _RETRY_HALVINGS:
            return (self.retry_backoff_ms * 1_000_000) >> (_RETRY_HALVINGS - answers)
        return int(self._retry_backoff.ms(answers - _RETRY_HALVINGS) * 1_000_000)

    def _candidate_count(self):
        if self._snapshot is not None and self._snapshot.brokers and not self._rebootstrapping:
            return len(self._snapshot.brokers)
        return len(self._bootstrap)

    def _raise_fatal_error_locked(self, found_standing):
        """Raises the fatal error, if any.  found_standing: the caller met it on coming,
        not after waiting (a send after the refusal): it needs metadata, so with a
        refusal of credentials one more attempt goes out (after its connection's
        reconnect backoff), in case they are good now; the caller fails at once."""
        if self._fatal_error is not None:
            if (found_standing and errors.refuses_credentials(self._fatal_error)
                    and not self._need_update):
                # call_soon takes the I/O thread's task lock, a leaf.
                self._need_update = True
                self._requests += 1
                self._thread.call_soon(self._refresh)
            # A copy per waiter: raising one instance in several threads would
            # chain their tracebacks together.
            raise copy.copy(self._fatal_error).with_traceback(None)

    def _describe_errors(self):
        if not self._errors:
            return "no answer yet"
        return "; ".join(f"{addr}: {err}" for addr, err in self._errors.items())


# An incomplete topic's first retry comes after retry_backoff_ms / 2**_RETRY_HALVINGS.
_RETRY_HALVINGS = 3

# The topic errors of a Metadata answer that waiting does not cure (the Java
# producer fails at once on these two as well), and what they mean here.
_REFUSED_TOPIC = {
    errors.InvalidTopicError.code: "the broker refuses the name (INVALID_TOPIC_EXCEPTION)",
    errors.TopicAuthorizationFailedError.code: (
        "this principal may not Describe it (the metadata answer refuses it), so it "
        "cannot write to it either"),
}

# Kafka's own rule for topic names (org.apache.kafka.common.internals.Topic).
_TOPIC_NAME_MAX_CHARS = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(topic):
    """Refuses, before anything goes on the wire, a name every broker refuses: empty,
    over 249 characters, '.' or '..', or with a character outside a-z A-Z 0-9 . _ -.

    Raises:
        TypeError: topic is not a str (as send() says it).
        IllegalTopicNameError: an InvalidTopicError and a ValueError, naming the topic
            and what is wrong with it.
    """
    if not isinstance(topic, str):
        # partitions_for(None) used to fail here on len(None), naming neither.
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    if not topic:
        why = "it is empty"
    elif len(topic) > _TOPIC_NAME_MAX_CHARS:
        why = f"it has {len(topic)} characters, more than {_TOPIC_NAME_MAX_CHARS}"
    elif topic in (".", ".."):
        why = "'.' and '..' are reserved"
    elif not _TOPIC_NAME.fullmatch(topic):
        bad = next(c for c in topic if not _TOPIC_NAME.fullmatch(c))
        why = f"{bad!r} is not allowed"
    else:
        return
    shown = repr(topic) if len(topic) <= 60 else f"{topic[:40]!r}... ({len(topic)} characters)"
    raise errors.IllegalTopicNameError(
        f"topic {shown} is not a valid Kafka topic name: {why} (Kafka allows 1 to "
        f"{_TOPIC_NAME_MAX_CHARS} characters from a-z, A-Z, 0-9, '.', '_' and '-')")


def _check_partition(topic, partition, info):
    """Raises NoSuchPartitionError unless info (topic's TopicInfo) has partition."""
    if partition not in info.partitions:
        raise errors.NoSuchPartitionError(
            f"topic {topic!r} has no partition {partition} (it has {len(info.partitions)})")


def _snapshot_from(response, old, known):
    """The snapshot of an answer.  old: the snapshot an answer naming only some
    topics updates (its other topics are kept), or None.  known: the snapshot the
    cache holds, or None, whose partitions with a newer leader epoch are kept
    (_newest)."""
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack)
               for b in response.brokers}
    topics = {} if old is None else dict(old.topics)
    for t in response.topics:
        partitions = {
            p.partition: PartitionInfo(p.partition, p.leader, p.leader_epoch,
                                       tuple(p.replicas), tuple(p.isr), p.error_code)
            for p in t.partitions}
        before = None if known is None else known.topics.get(t.name)
        if before is not None and t.topic_id is not None and before.topic_id == t.topic_id:
            partitions = {index: _newest(part, before.partitions.get(index))
                          for index, part in partitions.items()}
        topics[t.name] = TopicInfo(t.name, t.error_code, partitions, t.topic_id)
    return ClusterSnapshot(brokers, topics, response.controller_id, response.cluster_id)


def _newest(answered, cached):
    """answered, unless cached (the same topic, by id) has a newer leader epoch: the
    answer then comes from a broker that has not heard of the last election yet, and
    its leader is an old one (KIP-320; the Java client keeps its cached partition so
    too).  A leader it followed would refuse the records, NOT_LEADER_OR_FOLLOWER,
    and the producer would ask that broker again."""
    if (cached is not None and answered.leader_epoch >= 0
            and cached.leader_epoch > answered.leader_epoch):
        return cached
    return answered


def _usable(info):
    """True for a topic whose answer needs no second look soon: complete, or
    refused for good (a non-retriable error)."""
    return (info is not None and not _stale(info.error_code)
            and not any(p.leader < 0 or _stale(p.error_code) for p in info.partitions.values()))


def _moved_partitions(old, new, answered):
    """(topic, partition) of the answered topics whose leader differs between
    two snapshots, a partition that is new or gone included.  (A gone one used to be
    left out: a topic deleted and re-created with fewer partitions on the same broker
    moved no leader, so the producer kept the old partition count and sent keyed
    records to partitions that no longer existed.)"""
    moved = set()
    for topic in answered:
        name = topic.name
        info = new.topics[name]
        before = None if old is None else old.topics.get(name)
        for p, part in info.partitions.items():
            old_part = None if before is None else before.partitions.get(p)
            if old_part is None or old_part.leader != part.leader:
                moved.add((name, p))
        if before is not None:
            moved.update((name, p) for p in before.partitions if p not in info.partitions)
    return moved


def _topic_state(info):
    if info is None:
        return "not in the last metadata answer yet"
    if info.error_code:
        name = errors.ERROR_CODES.get(info.error_code, (f"error code {info.error_code}",))[0]
        return f"broker says {name}"
    return "no partitions"  # wait_for_topic returns a topic that has some
