"""Local HTTP services (the review page, the reward service): serve until Ctrl-C, then close."""
from __future__ import annotations


def serve_until_interrupted(server) -> None:
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
