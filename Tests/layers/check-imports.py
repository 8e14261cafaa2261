#!/usr/bin/env python3
"""Every module declares what it imports: each target's `import`s against its dependencies in
Package.swift (from `swift package describe`). An import of a module not declared (reached only
through another target's dependencies) or a dependency nothing imports fails, naming both."""
import glob, json, os, re, subprocess, sys

# Modules of the toolchain, always there.
TOOLCHAIN = {"FoundationEssentials", "Foundation", "Glibc", "Dispatch", "Synchronization", "Testing", "XCTest", "_Concurrency"}
IMPORT = re.compile(r"\s*(?:@testable\s+|@_exported\s+)?import\s+(?:struct\s+|class\s+|enum\s+|func\s+)?(\w+)")

package = json.loads(subprocess.run(["swift", "package", "describe", "--type", "json"], check=True,
                                    capture_output=True, text=True).stdout)
problems = []
for target in package["targets"]:
    declared = set(target.get("target_dependencies", [])) | set(target.get("product_dependencies", []))
    imported = set()
    for source in glob.glob(os.path.join(target["path"], "**", "*.swift"), recursive=True):
        with open(source) as file:
            imported |= {m.group(1) for m in map(IMPORT.match, file) if m}
    undeclared = imported - declared - TOOLCHAIN - {target["name"]}
    unused = declared - imported
    if undeclared:
        problems.append(f"{target['name']} imports {', '.join(sorted(undeclared))} without declaring it in Package.swift")
    if unused:
        problems.append(f"{target['name']} declares {', '.join(sorted(unused))} in Package.swift but imports none of it")
# Edges that must not exist (doc/architecture.md, "Modules and what each may import"): the page
# is a client of recd's socket, not a recorder (its spectrograms are SignalProcessing's), and the
# data plane knows nothing of the control plane.
FORBIDDEN = {("recd-web", "RecorderCore"), ("AudioGraph", "RecorderCore"), ("SignalProcessing", "RecorderCore"),
             ("recd-rtsp", "RecorderCore")}
for target in package["targets"]:
    declared = set(target.get("target_dependencies", [])) | set(target.get("product_dependencies", []))
    for source, forbidden in FORBIDDEN:
        if target["name"] == source and forbidden in declared:
            problems.append(f"{source} depends on {forbidden}: an edge the layers forbid")
print("\n".join(problems) or f"every one of {len(package['targets'])} targets declares exactly what it imports, and no forbidden edge")
sys.exit(1 if problems else 0)
