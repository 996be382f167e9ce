"""The client layer: broker connections, the I/O thread pool and cluster metadata.

May import protocol, record and errors; knows nothing of producers or batches beyond the
buffers it is handed.
"""
