#ifndef RECD_CBUILDINFO_H
#define RECD_CBUILDINFO_H

/// The git commit recd and recctl were built from, as `make` passed it in (commit.h, generated
/// next to build_info.c and ignored by git), or "" for a plain `swift build`.
/// A function rather than a macro: a new commit recompiles one C file and relinks, and no
/// Swift module sees a changed interface.
const char *recd_build_commit(void);

#endif
