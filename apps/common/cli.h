/* Command-line helpers shared by the apps: exit codes, option values with clear errors, failure
 * output, and whether an MPI launcher started the process. */
#ifndef DCP_APPS_CLI_H
#define DCP_APPS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dcpvk/status.h"

/* Exit codes of every app: 0 ok; 1 a runtime failure (device, model file, generation, a --verify
 * mismatch); 2 a usage or configuration error (unknown option, bad value, sizes the model or the
 * devices do not allow). Under MPI the processes agree on the largest (usage beats runtime). */
typedef enum dcp_exit_code { DCP_EXIT_OK = 0, DCP_EXIT_RUNTIME = 1, DCP_EXIT_USAGE = 2 } dcp_exit_code;

/* Parses an unsigned integer option value in [min, max]; on error prints
 * "<prog>: option <name>: '<value>' is not an integer in [min, max]" and returns 0. */
int dcp_cli_u32(const char *prog, const char *name, const char *value, uint32_t min, uint32_t max,
                uint32_t *out);
int dcp_cli_f32(const char *prog, const char *name, const char *value, float min, float max, float *out);
/* Matches value against a NULL-terminated list of choices; prints the allowed values on error and
 * returns -1, else the index. */
int dcp_cli_choice(const char *prog, const char *name, const char *value, const char *const *choices);
/* The value after option argv[*i] (advancing *i), or NULL after printing that it is missing. */
const char *dcp_cli_value(const char *prog, int argc, char **argv, int *i);
/* Writes n bytes of s as a JSON string literal (quotes included; control characters, quotes and
 * backslashes escaped; UTF-8 passes through, bytes that do not form a character become U+FFFD). */
void dcp_cli_json_string(FILE *f, const char *s, size_t n);
/* Writes n bytes of text to f as valid UTF-8: bytes that do not form a character become U+FFFD
 * (src/common/utf8.h). Each call stands alone: pieces of a stream must end on a character
 * boundary, as the detokenizer's do. */
void dcp_cli_put_text(FILE *f, const char *s, size_t n);
/* Prints "<prog>: <what>: <status>: <last error>" to stderr. */
void dcp_cli_report(const char *prog, const char *what, dcp_status st);
/* True when an MPI launcher started this process, as its environment says: MPICH Hydra and other
 * PMI launchers ($PMI_RANK), PMIx ($PMIX_RANK), Open MPI ($OMPI_COMM_WORLD_RANK). *size receives
 * the world size the launcher announces ($PMI_SIZE, $OMPI_COMM_WORLD_SIZE; 1 if none). Reads the
 * environment only: MPI is not started. */
bool dcp_cli_mpi_launched(int *size);

#endif
