"""Where the grader goes past the public API of the Jupyter packages it is built on.

One module per package (`jupyter_client`, `nbclient`, `nbconvert`, `nbgrader`) holds every
override of one of its private methods, every read of one of its private attributes and every
function of it replaced, each with the reason it exists. Each exposes what it opens as a public
method or function, which the rest of the grader uses; nothing else of the grader names a
private member of these packages (tests/unit/test_upstream.py). A new release of one of them is
checked here first: a private step renamed or changed shows in this folder's tests.
`distributed` has one module here too (a client whose event-loop thread started late is made
again), though its private names are not scanned for: they are words the grader uses for its own.

What these modules need of the grader they are given: none imports anything of it.

Not here: ipykernel's two replaced methods (`quiet_forked_children`, `print_in_pieces` in
sandboxed/kernel_host_program.py) run inside the sandbox, sent as text, where nothing of the
grader can be imported; and the JAX adapter reads JAX's own private modules in its sandboxed
program_data.py (the adapter's seam, not the core's).
"""
