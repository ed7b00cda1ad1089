"""`python -m cmsemu` / `cms-emulator`: run the emulator standalone on a loopback address."""

import argparse
import ipaddress
import signal
import threading

from cmsemu.config import EmulatorConfig
from cmsemu.control import reference
from cmsemu.emulator import Emulator
from cmstoken import __version__


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.version == 4 and address.is_loopback


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; print `base_url=...` once listening."""
    defaults = EmulatorConfig()
    parser = argparse.ArgumentParser(
        prog="cms-emulator",
        description="Emulate the Cluster Management Service API and its identity provider.",
        epilog=reference(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--host", default="127.0.0.1", help="IPv4 loopback address to bind")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free port)")
    parser.add_argument(
        "--service-token-lifetime",
        type=int,
        default=defaults.service_token_lifetime,
        help="service token lifetime in seconds",
    )
    parser.add_argument(
        "--auto-approve", action="store_true", help="approve every device code at once"
    )
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = parser.parse_args(argv)
    if not _loopback(args.host):
        parser.error(f"refusing to listen on non-loopback host {args.host!r}")
    defaults.service_token_lifetime = args.service_token_lifetime
    defaults.auto_approve = args.auto_approve
    defaults.verbose = args.verbose

    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    emulator = Emulator(defaults).start(args.host, args.port)
    try:
        print(f"base_url={emulator.base_url}", flush=True)
        stop.wait()
    finally:
        emulator.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
