"""The `local` provider and the machine harness it runs on, on this computer only.

- `provider`: the `local` provider driver (`clusters.providers.local.provider.local_provider`): real
  machines booted by a host's runtime (`HostRuntimeProvider`, `thishost` for this computer's),
  or loopback sandboxes (`SandboxProvider`).
- `runtime`: the host runtime, the program that boots machines as root on a host.
- `realnodes`: real Linux nodes in namespaces (docs/nodeops.md, "Isolated machines").
- `sandbox`: loopback SSH endpoints with sandbox roots, where namespaces cannot run; also the
  endpoints the node-operation tests and benchmarks use. `_asyncssh_server` is its SSH server
  for computers without OpenSSH's sshd.
- `standins/overlay.sh`: stand-ins for the software a sandbox cannot run.

None of it runs in production: production machines are reached by `clusters.nodeops` over
SSH. This package imports no Django (the provider module does), so the harness works in
benchmarks and in the node-operation tests without settings."""
