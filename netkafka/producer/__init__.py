"""The producer layer: the public Producer and everything between send() and the I/O pool.

Roles: producer (the public API), accumulator (open batches, sealing), sender (requests,
retries, completion), idempotence, partitioner, backoff, metrics, futures and the bulk
send path (batch_send).  May import client, protocol, record, config and errors.
"""
