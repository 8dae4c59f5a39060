"""Stand-ins for the world outside Fleet: what tests, benchmarks and the demo talk to in place of real BMCs and
real dcgm-exporters. No app imports this package (``tests/test_architecture.py`` checks it): the folders show what
is Fleet and what plays the world. Each stand-in shows what the real thing shows, no more; what a test needs to
look inside comes through a stand-in's own control API, never through the protocol it imitates."""
