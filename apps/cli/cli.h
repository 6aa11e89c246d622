/* Command-line helpers shared by the apps: exit codes, strict option values with clear errors,
 * failure output, output that checks its writes, signals that stop a run at a step boundary, and
 * whether an MPI launcher started the process. */
#ifndef DCP_APPS_CLI_H
#define DCP_APPS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dcpvk/status.h"

/* Exit codes of every app: 0 ok; 1 a runtime failure (device, model file, generation, a --verify
 * mismatch, a failed write of the output); 2 a usage or configuration error (unknown option, bad
 * value, sizes the model or the devices do not allow, more memory than the devices have, MPI
 * processes given different options); 128 + N after signal N stopped the run (130 SIGINT, 143
 * SIGTERM). Under MPI the processes agree on the largest (usage beats runtime). */
typedef enum dcp_exit_code {
    DCP_EXIT_OK = 0,
    DCP_EXIT_RUNTIME = 1,
    DCP_EXIT_USAGE = 2,
    DCP_EXIT_SIGNAL = 128, /* + the signal number */
} dcp_exit_code;

/* Where option and configuration messages go: stderr, or nowhere after dcp_cli_quiet(true) (the
 * processes of an MPI launch other than process 0: every process finds the same fault; one says
 * it). */
FILE *dcp_cli_diag(void);
void dcp_cli_quiet(bool quiet);

/* The apps' dcp_set_log_callback() receiver: prints the library's message and a newline to stderr
 * (whatever dcp_cli_quiet says: warnings and validation messages always show). Each app's main()
 * sets it first. */
void dcp_cli_log_stderr(void *user, const char *message);

/* Strict parsers (no message). Decimal only: digits, no sign, no leading space, no base prefix
 * ("010" is ten). false on anything else or on overflow. */
bool dcp_cli_parse_u64(const char *s, uint64_t *out);
/* A decimal number: [+-]digits[.digits][(e|E)[+-]digits] (or .digits); no hex, inf or nan, no
 * space. A value too small for a double (1e-400) reads as 0 or a subnormal; one too large fails
 * (*range set true). */
bool dcp_cli_parse_double(const char *s, double *out, bool *range);

/* Option values in [min, max]; on error print one of
 *   "<prog>: option <name>: '<value>' is not a decimal integer (allowed: min .. max)"
 *   "<prog>: option <name>: <value> is out of range (allowed: min .. max)"
 * to dcp_cli_diag() and return 0; 1 when *out was set. */
int dcp_cli_u64(const char *prog, const char *name, const char *value, uint64_t min, uint64_t max, uint64_t *out);
int dcp_cli_u32(const char *prog, const char *name, const char *value, uint32_t min, uint32_t max,
                uint32_t *out);
/* The same for numbers ("is not a decimal number"): a value in [min, max] rounded to float (a
 * positive value below FLT_TRUE_MIN becomes 0 only when min is 0, else it is out of range). */
int dcp_cli_f32(const char *prog, const char *name, const char *value, float min, float max, float *out);
int dcp_cli_f64(const char *prog, const char *name, const char *value, double min, double max, double *out);
/* Matches value against a NULL-terminated list of choices; prints the allowed values on error and
 * returns -1, else the index. */
int dcp_cli_choice(const char *prog, const char *name, const char *value, const char *const *choices);
/* The value after option argv[*i] (advancing *i), or NULL after printing that it is missing. */
const char *dcp_cli_value(const char *prog, int argc, char **argv, int *i);

/* Writes n bytes of s as a JSON string literal (quotes included; control characters, quotes and
 * backslashes escaped; UTF-8 passes through, bytes that do not form a character become U+FFFD).
 * Every string an app prints in JSON goes through it. */
void dcp_cli_json_string(FILE *f, const char *s, size_t n);
/* Writes n bytes of text to f as valid UTF-8: bytes that do not form a character become U+FFFD
 * (include/dcpvk/utf8.h). Each call stands alone: pieces of a stream must end on a character
 * boundary, as the detokenizer's do. */
void dcp_cli_put_text(FILE *f, const char *s, size_t n);
/* Prints "<prog>: <what>: <status>: <last error>" to stderr. */
void dcp_cli_report(const char *prog, const char *what, dcp_status st);

/* Help and version texts: formats the whole text into one buffer and writes it to f (stdout or
 * stderr) with write(2) after flushing what f holds, checking every write, so that a failure keeps
 * its own errno at any length (a text longer than stdio's buffer used to fail in an implicit flush
 * whose errno was lost: "Input/output error" instead of "No space left on device"). A failure on
 * stdout is kept for dcp_cli_finish_stdout. Returns false when the text was not written whole. */
bool dcp_cli_print_text(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --version of every app: "<name> <dcp_version()>" on stdout through dcp_cli_print_text. */
bool dcp_cli_print_version(const char *name);

/* Flushes stdout: false when a write to it failed, now or before (the first failure's errno is
 * kept for dcp_cli_finish_stdout). */
bool dcp_cli_stdout_ok(void);
/* Flushes stdout and checks that everything written to it arrived (a full disk, a closed pipe,
 * /dev/full). Returns rc unchanged when it did; else prints
 * "<prog>: writing the output: <strerror>" and returns DCP_EXIT_RUNTIME (unless rc already says
 * a failure). Every app ends through it. */
int dcp_cli_finish_stdout(const char *prog, int rc);

/* SIGINT and SIGTERM: the first sets a flag (dcp_cli_stop_signal) that the app polls at step
 * boundaries; a second one ends the process at once (exit status 128 + N). */
void dcp_cli_catch_signals(void);
/* The signal that asked to stop (SIGINT, SIGTERM), or 0. */
int dcp_cli_stop_signal(void);

/* A progress bar on stderr for a dcp_progress_fn (model loading): "\r<what> [#####.....]  45%
 * (123 / 456 MiB)", redrawn when the percentage moves and ended with a newline at 100%. Drawn only
 * when stderr is a terminal (isatty), so logs and pipes get nothing. Not thread-safe. */
typedef struct dcp_cli_progress {
    const char *what; /* e.g. "loading model" */
    int tty;          /* stderr is a terminal */
    int last;         /* percentage drawn last, -1: none yet */
} dcp_cli_progress;
void dcp_cli_progress_init(dcp_cli_progress *p, const char *what);
/* dcp_progress_fn-shaped: user is a dcp_cli_progress. */
void dcp_cli_progress_fn(void *user, uint64_t done, uint64_t total);

/* True when an MPI launcher started this process, as its environment says: MPICH Hydra and other
 * PMI launchers ($PMI_RANK), PMIx ($PMIX_RANK), Open MPI ($OMPI_COMM_WORLD_RANK). *size receives
 * the world size the launcher announces ($PMI_SIZE, $OMPI_COMM_WORLD_SIZE; 1 if none). Reads the
 * environment only: MPI is not started. */
bool dcp_cli_mpi_launched(int *size);

/* For a process that no MPI launcher started: gives SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGHUP
 * back their default action where the handler in place is UCX's. Debian's MPICH links UCX, whose
 * library constructor (ucs_init) installs those handlers in every program linked with MPI, before
 * main and whether MPI starts or not: a crash then prints a backtrace from inside the signal
 * handler (malloc and stdio on what may be a corrupted heap, which can hang instead of ending), and
 * SIGHUP only raises UCX's log level instead of ending the program. Other handlers (a sanitizer's,
 * a debugger's) are left alone. docs/design.md, "Teardown and lifetimes". */
void dcp_cli_release_mpi_signals(void);

#endif
