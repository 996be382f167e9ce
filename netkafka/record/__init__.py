"""The record layer: the buffer pool, the RecordBatch v2 builder, column readers,
compression, CRC and the legacy message sets.  Native; imports only errors and csrc.
"""
