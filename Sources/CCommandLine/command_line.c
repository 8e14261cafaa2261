// Hands Swift's runtime the process's arguments from where they always are, before main.
//
// Why: the Swift runtime on Linux finds argv by itself (stdlib/public/CommandLineSupport/
// CommandLine.cpp, ArgvGrabber, a static initializer): it takes `environ`, checks that it
// points into the stack, and walks back from it past argv's pointers to argc. That holds only
// while `environ` is still the array the kernel put on the stack. A constructor that runs
// before it and adds a variable (setenv of a new name) moves `environ` to the heap: glibc
// copies the array. The runtime then finds no argv at all, CommandLine.arguments is empty,
// and ArgumentParser sees no options: recd ran with every default (the system socket, device
// `default`) and the user's --socket, --device and --recordings-dir silently gone. A preloaded
// library's constructor runs before the executable's, so any LD_PRELOAD that sets a variable
// did it: libfaketime sets FAKETIME_SHARED (issue 50; not when its parent, e.g. strace or gdb
// preloaded too, already set it). Every start under such a preload lost its arguments, in the
// release binary (the runtime inside, --static-swift-stdlib) and with libswiftCore.so alike:
// the preload's constructor runs before the runtime's in both.
//
// How: glibc calls every constructor with (argc, argv, envp); argv is the kernel's array on
// the stack, valid for the whole process. This constructor gives it to the runtime through
// _swift_stdlib_overrideUnsafeArgvArgc (the runtime's entry point for a host that supplies
// argv, as the interpreter does), which CommandLine consults before it looks for argv
// itself, when it is first read (in main). So what recd parses never depends on where
// `environ` is, whoever moved it: a preload, or recd's own malloc tuning, whose constructor
// runs before the runtime's in the release binary and adds a variable before it re-executes
// (Sources/CMallocTuning: when the execv fails, recd went on without its arguments too).

#include "CCommandLine.h"

#include <stddef.h>

// CommandLine.cpp: `SWIFT_CC(swift) extern "C" void _swift_stdlib_overrideUnsafeArgvArgc(char
// **argv, int argc)`, exported by libswiftCore (the static archive and the shared library).
extern void _swift_stdlib_overrideUnsafeArgvArgc(char **argv, int argc) __attribute__((swiftcall));

static int count;

int recd_command_line_count(void) { return count; }

__attribute__((constructor)) static void recd_capture_command_line(int argc, char **argv, char **envp) {
    (void)envp;
    if (argc <= 0 || argv == NULL || argv[argc] != NULL) {
        return;  // not glibc's arguments: leave the runtime to its own search
    }
    count = argc;
    _swift_stdlib_overrideUnsafeArgvArgc(argv, argc);
}
