"""Where grading tasks run: here, one student after another, or on Dask workers.

Both runners do the same two things: the reference run of the instructor's notebooks
(autograder/run/reference.py, one task per notebook) and one task per student
(autograder/run/worker.py). A task that fails twice is reported, never retried forever.

Dask is secured so that nothing but this grader can drive it, even from a machine it reaches:
the local cluster speaks TLS with a certificate made for this run only, and has no dashboard;
a remote scheduler must speak TLS too, with the instructor's certificates. Every task key
carries this run's id, so two runs on one scheduler never share a result, and workers with
more than one thread are refused (a worker grades one student at a time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.course.errors import UsageError
from autograder.course.outcomes import Trouble, TroubleKind
from autograder.course.task_template import CourseSource, TaskTemplate
from autograder.kernel.compile_cache import unseal
from autograder.kernel.kernels import SOCKETS_TAG_VARIABLE, socket_folders_prefix
from autograder.run.options import GradingOptions
from autograder.run.reference import ReferenceRun, release_reference_session, run_reference
from autograder.run.stopping import raise_if_stopped, stopped_by, stops_held
from autograder.run.tls import LOCAL_WORKER_KEY, PRELOAD, RARE_HOUSEKEEPING_MS
from autograder.run.worker import (
    SANDBOXES_PREFIX,
    StudentResult,
    StudentTask,
    grade_student,
    release_sandboxes,
    warm_up,
)
from autograder.upstream.distributed import leave_out_gather_exits, made_despite_slow_loop

if TYPE_CHECKING:
    from dask.distributed import Client, LocalCluster


def broken_result(student_id: str, why: str) -> StudentResult:
    """A student the grader could not grade (its task failed twice): named as the grader's failure,
    not the submission's (the run exits 4), and stored nowhere (no zero stands for a grade)."""
    return StudentResult(
        student_id, failed=[Trouble(TroubleKind.GRADER_FAILED, f"{why}; not graded: grade them again")]
    )


def submission_size(task) -> int:
    """About how much grading a student's task holds: the bytes of their notebooks."""
    return sum(len(data) for data in task.notebooks.values())


def in_grading_order(tasks, processes: int, largest_first: bool = True) -> list:
    """The tasks, largest submission first where processes share them (a long one started last
    would leave the others idle), each saying whether another is likely to follow it on its
    process: the last `processes` do not, so no sandbox is made ahead for a student who never comes."""
    ordered = sorted(tasks, key=submission_size, reverse=True) if largest_first else list(tasks)
    last = len(ordered) - max(1, processes)
    return [dataclasses.replace(task, another_follows=index < last) for index, task in enumerate(ordered)]


class HereRunner:
    """Grading in this process, one student after another (--jobs 1)."""

    def __init__(self, options: GradingOptions):
        self.options = options

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with stops_held():  # a stop as the sandboxes end comes once they have ended (cut short, files stayed)
            release_sandboxes()
        return False

    def start_reference(self, source: CourseSource) -> None:
        self._source = source

    def reference_runs(self) -> list[ReferenceRun]:
        keep_for = uuid.uuid4().hex[:12]  # one session for all the notebooks, as a student's
        try:
            return [
                run_reference(name, self._source, self.options, keep_for=keep_for)
                for name in self._source.assignment.notebooks
            ]
        finally:
            release_reference_session()

    def run(self, tasks: list[StudentTask], template: TaskTemplate, progress) -> list[StudentResult]:
        results = []
        for task in in_grading_order(tasks, 1, largest_first=False):
            for attempt in (1, 2):
                try:
                    result = grade_student(task, template)
                    break
                except Exception as error:  # the machinery failed on this submission: retry once
                    raise_if_stopped()  # ... unless a stop made it fail: no student is graded again after one
                    if attempt == 2:
                        result = broken_result(
                            task.student_id, f"grading failed twice ({type(error).__name__}: {error})"
                        )
            progress.update(result)
            results.append(result)
            raise_if_stopped()
        return results


#: A local cluster's housekeeping, made rare: it serves no pages, so nobody reads its profiles or
#: its monitor, and every wake-up of its event loops (the scheduler's, each nanny's and worker's)
#: is CPU taken from the kernels being graded. Dask's defaults (a health tick every 20 ms, each
#: worker's stacks sampled 100 times a second, process counters twice a second) cost an idle
#: cluster of two workers 5.5 CPU-s a minute; these, 1.0. The rates are the preload's (tls.py's
#: keep_housekeeping_rare, which an instructor's own cluster runs too); as configuration they
#: also reach the nannies, where no preload of the workers runs.
LOCAL_CLUSTER_QUIET = {
    "distributed.admin.tick.interval": f"{RARE_HOUSEKEEPING_MS['tick']}ms",
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.interval": f"{RARE_HOUSEKEEPING_MS['monitor']}ms",
    "distributed.deploy.cluster-repr-interval": "5s",  # a notebook widget's refresh
    LOCAL_WORKER_KEY: True,  # (reaches the workers with the rest: a heartbeat lost as it closes is not logged)
}


#: Seconds a stopped run's worker has to close before it is killed (runners.py's DaskRunner).
STOP_GRACE_S = 1.0


class DaskRunner:
    """Grading on a local Dask cluster of `jobs` single-threaded worker processes, or on a
    running scheduler (a `tls://` address and the instructor's SchedulerSecurity).

    Started before the class course is set up, so the workers start, import and run the
    reference while this process builds the gradebook.
    """

    def __init__(self, options: GradingOptions):
        self.options = options
        self.jobs, self.scheduler, self.scheduler_security = options.jobs, options.scheduler, options.scheduler_security
        self.run_id = uuid.uuid4().hex[:12]
        self.cluster: LocalCluster | None = None
        self.client: Client | None = None  # both made by `with runner:`
        #: The local cluster's workers' TMPDIR (and Dask's scratch space): what they leave there,
        #: ended mid-task by a stop, is removed with it.
        self.folder: Path | None = None
        self._references: list = []

    def __enter__(self):
        import dask
        from dask.distributed import Client, LocalCluster

        # A task that kills its worker fails at once (not after three workers) and is retried here,
        # once; a worker is handed its next student only when it is free (run() sends the largest first).
        settings = {"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.worker-saturation": 1.0}
        settings |= LOCAL_CLUSTER_QUIET
        leave_out_gather_exits()
        if self.scheduler is None:
            # Dask's scratch space (the scheduler's, each nanny's and worker's), in the run's own folder.
            self.folder = Path(tempfile.mkdtemp(prefix="autograder-workers-"))
            settings["temporary-directory"] = str(self.folder)
        with dask.config.set(settings):
            if self.scheduler is None:
                folder = self.folder
                try:
                    self._start_local_cluster(folder, LocalCluster, Client)
                except BaseException:  # `with` runs no __exit__ for it: the cluster, if made, and its folder go here
                    try:
                        if self.cluster is not None:
                            self._end_workers_now()
                    finally:
                        self._remove_folder()
                    raise
            else:
                security = self.scheduler_security.security()
                self.client = made_despite_slow_loop(lambda: Client(self.scheduler, security=security, timeout="30s"))
                self._refuse_threaded_workers()
        return self

    def _start_local_cluster(self, folder: Path, LocalCluster, Client) -> None:
        # A stop while the cluster starts comes once it has started (stops_held), so that the
        # cluster is ended as a started one is, not left half made.
        with stops_held():
            self.cluster = made_despite_slow_loop(
                lambda: LocalCluster(
                    n_workers=self.jobs,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    memory_limit=0,
                    silence_logs=logging.ERROR,
                    security=True,
                    protocol="tls://",
                    host="127.0.0.1",
                    # No HTTP port (autograder/run/tls.py's dask_setup): the scheduler's would name the
                    # students being graded to anyone on this machine, without a certificate.
                    scheduler_kwargs={"preload": [PRELOAD]},
                    preload=[PRELOAD],
                    # What a worker leaves, ended mid-task by a stop, goes with the folder.
                    env={"TMPDIR": str(folder), SOCKETS_TAG_VARIABLE: self.run_id},
                )
            )
            self.client = Client(self.cluster, timeout="30s")  # on the cluster's loop: no thread of its own

    def _client(self) -> Client:
        """The client `with runner:` made."""
        assert self.client is not None, "a DaskRunner is used inside `with runner:`"
        return self.client

    def _refuse_threaded_workers(self) -> None:
        client = self._client()
        workers = client.scheduler_info()["workers"]
        if not workers:
            client.close()
            raise UsageError(f"the scheduler at {self.scheduler} has no workers")
        threaded = sorted(addr for addr, info in workers.items() if info.get("nthreads", 1) != 1)
        if threaded:
            client.close()
            raise UsageError(
                f"workers with more than one thread ({', '.join(threaded)}): start them with "
                "`--nthreads 1` (a worker grades one student at a time)"
            )

    def __exit__(self, kind, *exc):
        try:
            stopping = (kind is not None and issubclass(kind, KeyboardInterrupt)) or stopped_by() is not None
            if self.cluster is not None and stopping:  # (a stop another library took for a failure, too)
                self._end_workers_now()
                return False
            # A stop while the run's own workers close comes once they have closed (stops_held): cut
            # short, the close left live workers under a folder then removed, and Dask's exit closed
            # them again. An instructor's cluster's workers (no cluster here) may not answer: a stop
            # still cuts that wait short.
            with stops_held() if self.cluster is not None else contextlib.nullcontext():
                try:
                    self._client().run(release_sandboxes)  # the sandbox each worker made for a next student
                except Exception:  # a worker that is gone: its sandboxes end as their lines close (confine.grader_gone)
                    pass
                self._client().close()
                if self.cluster is not None:
                    self.cluster.close()
        finally:
            self._remove_folder()
        return False

    def _remove_folder(self) -> None:
        """The local cluster's folder, and the socket folders its workers made in /tmp (where the
        folder's path was too long for a socket's)."""
        if self.folder is not None:
            # A sealed cache folder cannot be listed, so not removed, until unsealed: each worker's,
            # in its sandboxes' folder, left sealed by a worker ended mid-task (root removes it all the same).
            for folder in self.folder.glob(SANDBOXES_PREFIX + "*"):
                unseal(folder)
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
            for sockets in Path("/tmp").glob(socket_folders_prefix(self.run_id) + "*"):
                shutil.rmtree(sockets, ignore_errors=True)

    def _end_workers_now(self) -> None:
        """A stopped run (Ctrl-C, SIGTERM) ends its local workers before anything of the run is
        removed: a worker still grading would write into a removed --out or sandbox. Each is asked
        to close and killed STOP_GRACE_S later, mid-task or not (its sandboxes end as their lines close), its
        nanny closing too, so that none is started again. What Dask says of students its workers
        left unfinished is the stop's doing; the run says it stopped."""
        import asyncio

        assert self.cluster is not None
        nannies = list(self.cluster.workers.values())

        async def end_them():
            await asyncio.gather(*(nanny.close(timeout=STOP_GRACE_S) for nanny in nannies), return_exceptions=True)

        dask_logs = logging.getLogger("distributed")
        level = dask_logs.level
        dask_logs.setLevel(logging.CRITICAL + 1)
        try:
            self.cluster.sync(end_them)
            if self.client is not None:  # (none yet when the stop came as the cluster started)
                self.client.close()
            self.cluster.close()
        finally:
            dask_logs.setLevel(level)

    def _key(self, *parts) -> str:
        return "-".join(["autograder", self.run_id, *map(str, parts)])

    def start_reference(self, source: CourseSource) -> None:
        # Largest notebook first (the most to compile), so the workers finish at about the same time.
        order = sorted(source.assignment.notebooks, key=lambda name: -len(source.notebook(name)))
        self._references = [
            self._client().submit(
                run_reference,
                name,
                source,
                self.options,
                # A local worker's next notebook of this run takes its session. A remote worker's
                # never does: the run may stop while it is busy, and nothing would end the session
                # it then kept (a local worker ends with its run).
                keep_for=self.run_id if self.scheduler is None else None,
                key=self._key("reference", name),
                pure=False,
            )
            for name in order
        ]

    def reference_runs(self) -> list[ReferenceRun]:
        return self._client().gather(self._references)

    def run(self, tasks: list[StudentTask], template: TaskTemplate, progress) -> list[StudentResult]:
        from dask.distributed import as_completed

        client = self._client()
        client.run(warm_up)
        shared = client.scatter(template, broadcast=True)
        attempts, results = {}, []
        futures = as_completed()
        by_key = {}
        for task in in_grading_order(tasks, len(client.scheduler_info()["workers"]) or self.jobs):
            attempts[task.student_id] = 1
            key = self._key("grade", task.student_id, 1)
            by_key[key] = task
            futures.add(client.submit(grade_student, task, shared, key=key, pure=False))
        for future in futures:
            task = by_key[future.key]
            try:
                result = future.result()
            except Exception as error:
                raise_if_stopped()  # a task failed by the stop is not submitted again
                if attempts[task.student_id] < 2:
                    attempts[task.student_id] += 1
                    key = self._key("grade", task.student_id, attempts[task.student_id])
                    by_key[key] = task
                    futures.add(client.submit(grade_student, task, shared, key=key, pure=False))
                    continue
                result = broken_result(
                    task.student_id, f"its grading worker failed twice ({type(error).__name__}: {error})"
                )
            progress.update(result)
            results.append(result)
            raise_if_stopped()
        return results
