"""`autograder tls FOLDER`: the TLS files a Dask cluster of graders needs, made in one command.

Dask runs code for whoever connects to it, so the grader speaks to a scheduler only over TLS,
with certificates signed by a certificate authority of the course's own. This writes, into
FOLDER (created with permissions for its owner only):

    ca.pem                           the certificate authority (give it to every machine)
    scheduler.pem, scheduler-key.pem the scheduler's certificate and key
    worker.pem, worker-key.pem       the workers' (one for all of them)
    client.pem, client-key.pem       the grader's, for `autograder grade --scheduler tls://...`

The authority's own key is not kept: no further certificate can be signed with it, so making
new files means making them all again. Every certificate names the hosts given with --host
(default: this machine's name and localhost) and is valid for --days (default 30).

TLS is then the only way in: started with `--preload autograder.run.tls`, a scheduler or worker
stops the HTTP server every Dask server starts (`dask_setup`), and its log no longer announces
that server as a dashboard (`DashboardLineLeftOut`, put on Dask's loggers when this module is
imported, before the server logs its addresses). The same preload keeps the server's
housekeeping rare (`keep_housekeeping_rare`): the CPU of a grading cluster is the kernels'.
In the workers of the grader's own local cluster it also leaves out the traceback of a heartbeat
that finds the scheduler closed as the run ends (`LostHeartbeatLeftOut`).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.course.errors import ExitCode

ROLES = ("scheduler", "worker", "client")
#: The preload (`dask scheduler|worker --preload PRELOAD`) that closes a server's HTTP port.
PRELOAD = "autograder.run.tls"


class DashboardLineLeftOut(logging.Filter):
    """Dask logs "dashboard at: <address>" for the HTTP server every scheduler and worker starts,
    with `--no-dashboard` too; the preload closes that server, so the line names a port that does
    not answer (and invites a look at one that would name the students being graded)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "dashboard at" not in record.getMessage()


def leave_out_dashboard_lines() -> None:
    """Put the filter on the loggers of Dask's servers (once), and quiet the note about a proxy
    for an HTTP server that is closed."""
    for name in ("distributed.scheduler", "distributed.worker"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DashboardLineLeftOut) for f in logger.filters):
            logger.addFilter(DashboardLineLeftOut())
    logging.getLogger("distributed.http.proxy").setLevel(logging.WARNING)


#: What a worker logs, with a traceback, when its heartbeat finds the scheduler gone.
HEARTBEAT_LOST = "Failed to communicate with scheduler during heartbeat"
#: Dask configuration the grader's own local cluster sets (runners.py): its workers are the run's.
LOCAL_WORKER_KEY = "autograder.local-cluster-worker"


class LostHeartbeatLeftOut(logging.Filter):
    """A worker whose heartbeat is on its way as the grader closes its local cluster logs the lost
    scheduler with a traceback (Dask's race, seen in 1 of 8 closes, one with more workers
    than cores), under a run that went well. Left out in the workers of the grader's own cluster,
    whose client reports a scheduler lost mid-run itself; a worker an instructor started keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(HEARTBEAT_LOST):
            return True
        import dask

        return not dask.config.get(LOCAL_WORKER_KEY, False)


def leave_out_lost_heartbeats() -> None:
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, LostHeartbeatLeftOut) for f in logger.filters):
        logger.addFilter(LostHeartbeatLeftOut())


# Imported as a preload, this runs before the server logs its addresses (dask_setup runs after).
leave_out_dashboard_lines()
leave_out_lost_heartbeats()


def dask_setup(server) -> None:
    """Run by Dask in each server started with `--preload autograder.run.tls`, once it listens.

    Every scheduler and worker serves HTTP besides its TLS port, even with `--no-dashboard`, to
    anyone who connects, without a certificate: the scheduler on port 8787 of every interface. Its
    pages name the tasks (a grading task's name holds the student's id), the workers and their call
    stacks and logs. Stopped here, the TLS port with the course's certificates is the only way in."""
    http = getattr(server, "http_server", None)
    if http is not None:
        http.stop()
    keep_housekeeping_rare(server)
    leave_stops_to_the_run(server)


def leave_stops_to_the_run(server) -> None:
    """A worker of the grader's own local cluster ignores Ctrl-C. A terminal sends it to the whole
    process group: a worker it reached died with a traceback, and the scheduler logged the dead
    workers' students as failed, while the run itself stopped; the run ends its workers itself
    (runners.py's DaskRunner, before it removes its folders). A worker an instructor started
    keeps Ctrl-C."""
    import signal
    import threading

    import dask
    from distributed import Worker

    if not isinstance(server, Worker) or not dask.config.get(LOCAL_WORKER_KEY, False):
        return
    if threading.current_thread() is threading.main_thread():  # where a worker process runs its loop
        signal.signal(signal.SIGINT, signal.SIG_IGN)


#: A grading server's timers, in ms, at their longest (Dask's defaults serve a live dashboard).
#: The tick: Dask warns of a blocked event loop after 3 s, which a 1 s tick still sees.
RARE_HOUSEKEEPING_MS = {"tick": 1000, "monitor": 5000}
#: A worker's profiler samples its threads' stacks 100 times a second for pages nobody can open.
PROFILER_TIMERS = ("profile", "profile-cycle")


def keep_housekeeping_rare(server) -> None:
    """No profiler, a tick once a second and the process counters every 5 s, in a scheduler or
    worker started with this preload, as a local grading run's cluster is configured (runners.py).
    Run before the server starts its timers, so none starts at Dask's rate."""
    timers = server.periodic_callbacks
    for name in PROFILER_TIMERS:
        profiler = timers.pop(name, None)
        if profiler is not None:
            profiler.stop()
    for name, longest in RARE_HOUSEKEEPING_MS.items():
        timer = timers.get(name)
        if timer is not None and timer.callback_time < longest:
            timer.callback_time = longest  # read by tornado each time it schedules the next call


@dataclass(frozen=True)
class SchedulerSecurity:
    """The instructor's TLS files for a remote scheduler (dask's `--tls-*` options): the client's."""

    ca_file: str
    cert: str
    key: str

    def security(self):
        from distributed.security import Security

        return Security(
            tls_ca_file=self.ca_file, tls_client_cert=self.cert, tls_client_key=self.key, require_encryption=True
        )


def _name(common: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _subject_names(hosts: list[str]):
    from cryptography import x509

    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_tls_files(folder: Path, hosts: list[str] | None = None, days: int = 30) -> dict[str, Path]:
    """Write the CA and the three certificates into folder; return {file name: path}."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    hosts = hosts or [socket.gethostname(), "localhost", "127.0.0.1"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=days)
    ca_key = _key()
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("autograder course CA"))
        .issuer_name(_name("autograder course CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    written = {"ca.pem": folder / "ca.pem"}
    written["ca.pem"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for role in ROLES:
        key = _key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(f"autograder {role}"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_subject_names(hosts), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        for name, data in (
            (f"{role}.pem", certificate.public_bytes(serialization.Encoding.PEM)),
            (f"{role}-key.pem", _pem_key(key)),
        ):
            path = folder / name
            path.write_bytes(data)
            os.chmod(path, 0o600)
            written[name] = path
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="autograder tls", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the files go (made, owner-only)")
    parser.add_argument("--host", action="append", default=[], help="a host name or address the certificates name")
    parser.add_argument("--days", type=int, default=30, help="days the certificates are valid (default 30)")
    args = parser.parse_args(argv)
    if args.days < 1:
        print("error: --days must be at least 1", file=sys.stderr)
        return ExitCode.USAGE
    written = make_tls_files(args.folder, args.host or None, args.days)
    print(f"wrote {', '.join(sorted(written))} into {args.folder}")
    return ExitCode.DONE
