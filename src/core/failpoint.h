// Test hooks for crash safety. With LLMTRAIN_FAILPOINT=name[,name...] set, a process that reaches one
// of the named points of a write kills itself with SIGKILL, as a crash or the OOM killer would, so that
// tests can check that every instant of a replace leaves a complete output. The name
// "replace:no-exchange" instead makes write_dir_atomic take the two-rename path that filesystems
// without an atomic exchange (NFS) get; "<point>+interrupts" sends the process two SIGINTs there, as a
// user pressing Ctrl-C twice would; "train:throw:rankR" makes rank R of a run throw at step 3 (the
// Trainer). Unset, each point is one getenv.
#pragma once

namespace llmtrain::detail {

/// True when `name` is among LLMTRAIN_FAILPOINT's names.
bool failpoint_set(const char* name);

/// Kills this process (SIGKILL) when `name` is among LLMTRAIN_FAILPOINT's names; interrupts it twice
/// (SIGINT) when `name+interrupts` is.
void failpoint(const char* name);

}  // namespace llmtrain::detail
