#include "CBuildInfo.h"

// `make build-info` writes commit.h (`#define RECD_COMMIT "…"`) and touches this file when the
// commit changes, so that a build that ran before commit.h existed compiles it again.
#if __has_include("commit.h")
#include "commit.h"
#endif
#ifndef RECD_COMMIT
#define RECD_COMMIT ""
#endif

const char *recd_build_commit(void) {
    return RECD_COMMIT;
}
