#ifndef RECD_CCOMMANDLINE_H
#define RECD_CCOMMANDLINE_H

/// The argument count glibc handed this process's constructors (see command_line.c); 0 if they
/// did not run. Swift's CommandLine.arguments holds the same arguments.
int recd_command_line_count(void);

#endif
