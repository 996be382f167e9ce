"""Kafka wire protocol: request encoders, response decoders, version negotiation.

One module per API, each holding that API's ApiSpec (key, versions it speaks,
first flexible version), its request encoder and its response decoder:

    api_versions.py      ApiVersions, the first request of every connection
    metadata.py          Metadata
    produce.py           Produce (its answer decoded natively by _produce.pyx)
    init_producer_id.py  InitProducerId
    sasl_handshake.py    SaslHandshake, naming the SASL mechanism
    sasl_authenticate.py SaslAuthenticate, one SASL message each way
    find_coordinator.py  FindCoordinator (transaction and group coordinators)
    add_partitions_to_txn.py, add_offsets_to_txn.py, txn_offset_commit.py,
    end_txn.py           the transaction APIs (producer/transaction_manager.py)
    describe_producers.py DescribeProducers, what a leader knows of a producer id
    offset_fetch.py      OffsetFetch, a consumer group's committed offsets

and what they share:

    framing.py   API keys, request and response headers, the request writer,
                 the broker address type (Node), the per-partition error codes two
                 transaction APIs answer with
    versions.py  the versions netkafka speaks (collected from the API modules)
                 and negotiate_versions, which picks one per API for a broker
    _reader.pyx  the checked Reader every decoder reads through (cimportable:
                 _reader.pxd): a hostile response raises ProtocolError, never
                 reads out of bounds nor allocates by a size it chose

A new API is a new module declaring its ApiSpec, its ApiKey member in
framing.py and its entry in versions.APIS.  Decoders take a response after its
correlation id (the connection reads that to match it with its request).
Nothing here keeps state: any thread may call any function.
"""
