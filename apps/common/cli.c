/* Command-line helpers shared by the apps. */
#include "common/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

int dcp_cli_u32(const char *prog, const char *name, const char *value, uint32_t min, uint32_t max,
                uint32_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-' || v < min || v > max) {
        fprintf(stderr, "%s: option %s: '%s' is not an integer in [%u, %u]\n", prog, name, value, min, max);
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

int dcp_cli_f32(const char *prog, const char *name, const char *value, float min, float max, float *out)
{
    char *end = NULL;
    errno = 0;
    float v = strtof(value, &end);
    if (errno || end == value || *end || !(v >= min && v <= max)) {
        fprintf(stderr, "%s: option %s: '%s' is not a number in [%g, %g]\n", prog, name, value, min, max);
        return 0;
    }
    *out = v;
    return 1;
}

int dcp_cli_choice(const char *prog, const char *name, const char *value, const char *const *choices)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(value, choices[i]) == 0) return i;
    fprintf(stderr, "%s: option %s: '%s' is not allowed (allowed:", prog, name, value);
    for (int i = 0; choices[i]; i++) fprintf(stderr, " %s", choices[i]);
    fprintf(stderr, ")\n");
    return -1;
}

const char *dcp_cli_value(const char *prog, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: option %s needs a value (see --help)\n", prog, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

void dcp_cli_report(const char *prog, const char *what, dcp_status st)
{
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, dcp_status_string(st), dcp_last_error());
}

/* Streams s through the UTF-8 sanitizer in pieces of bounded size, handing each sanitized piece
 * to put (which writes it to f). */
static void sanitized(FILE *f, const char *s, size_t n, void (*put)(FILE *f, const char *p, size_t n))
{
    enum { PIECE = 256 };
    char buf[DCP_UTF8_OUT_MAX(PIECE)];
    dcp_utf8_stream u = DCP_UTF8_STREAM_INIT;
    for (size_t i = 0; i < n; i += PIECE) put(f, buf, dcp_utf8_push(&u, s + i, n - i < PIECE ? n - i : PIECE, buf));
    put(f, buf, dcp_utf8_flush(&u, buf));
}

static void put_raw(FILE *f, const char *p, size_t n) { fwrite(p, 1, n, f); }

static void put_json_escaped(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

void dcp_cli_json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    sanitized(f, s, n, put_json_escaped);
    fputc('"', f);
}

void dcp_cli_put_text(FILE *f, const char *s, size_t n) { sanitized(f, s, n, put_raw); }

bool dcp_cli_mpi_launched(int *size)
{
    static const char *const rank_vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", NULL};
    static const char *const size_vars[] = {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE", NULL};
    bool launched = false;
    for (int i = 0; rank_vars[i] && !launched; i++) {
        const char *v = getenv(rank_vars[i]);
        launched = v && *v;
    }
    *size = 1;
    for (int i = 0; size_vars[i]; i++) {
        const char *v = getenv(size_vars[i]);
        if (v && *v) {
            *size = atoi(v);
            break;
        }
    }
    return launched;
}
