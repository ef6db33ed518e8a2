"""The core entry points: one function per command (docs/architecture.md, "The command contract").

A command module under patchctl/cli/commands/ calls exactly one of them. They sit above the
series transaction (txn/), the clean room (room/), the upstream and the series model; one
feature does not import another, except the composers `ci` and `prefixes`.
"""
