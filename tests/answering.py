"""A stand-in for a producer's metadata cache, connection pool and connection in one,
for tests of what the producer does with an answer: every call() gets `response`."""


class AnsweringConnection:
    """Every call() is answered `response` (settable); the pool's connection() calls are
    noted in `connections` and hand back this object."""

    def __init__(self, response):
        self.response = response
        self.config = type("Config", (), {"client_id": "test"})()
        self.connections = []

    def least_loaded_connection(self, timeout_s):
        return self

    def call(self, api_key, encode, decode, timeout_s, max_api_version=None):
        return self.response

    def describe(self):
        return "node 0"

    def connection(self, node_id, host, port):
        self.connections.append((node_id, host, port))
        return self
