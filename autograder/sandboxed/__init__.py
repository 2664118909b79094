"""What runs inside a sandbox, sent there as text: the confinement, the wire format, the kernel's
agent, the kernel host's program and the judge's helper programs. Imports only from here."""
