"""netkafka's version: one definition, read by the package, the build and the ApiVersions
request (which tells the broker the client's software version)."""
__version__ = "0.1.0"
