"""The `local` provider and the machine harness it runs on, on this computer only.

- `provider`: the `local` provider driver (`clusters.providers.local.provider.LocalProvider`).
- `realnodes`: real Linux nodes in namespaces (docs/nodeops.md, "Isolated machines").
- `sandbox`: loopback SSH endpoints with sandbox roots, where namespaces cannot run; also the
  endpoints the node-operation tests and benchmarks use. `_asyncssh_server` is its SSH server
  for computers without OpenSSH's sshd.
- `standins/overlay.sh`: stand-ins for the software a sandbox cannot run.

None of it runs in production: production machines are reached by `clusters.nodeops` over
SSH. This package imports no Django (the provider module does), so the harness works in
benchmarks and in the node-operation tests without settings."""
