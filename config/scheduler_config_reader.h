// Reading a [scheduler] table, shared by node files and ferry-sim scenarios so both accept
// exactly the same keys with the same checks.
//
// Thread safety: requires external synchronization (on the reader).
#pragma once

#include "config/scheduler_config.h"
#include "config/toml_reader.h"

namespace ferry {

// The scalar keys of [scheduler] (discipline, ema_halflife_seconds, ...). Also used for each
// FERRY_SCHEDULER_* override.
void ReadSchedulerKeys(TableReader& reader, SchedulerConfig* config);

// The whole table: the scalar keys, [scheduler.models.NAME], and unknown-key checks.
void ReadSchedulerTable(TableReader& reader, SchedulerConfig* config);

}  // namespace ferry
