/* DCP_API marks the declarations of the public API: the only symbols libdcpvk.so exports. The
 * library is built with hidden visibility (-fvisibility=hidden), so everything else, the private
 * dcp_* functions its folders share included, stays inside it; test_exports checks that the
 * exported symbols are exactly the DCP_API declarations of include/dcpvk/. For a program, and for
 * the static library, DCP_API changes nothing. */
#ifndef DCPVK_EXPORT_H
#define DCPVK_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define DCP_API __attribute__((visibility("default")))
#else
#define DCP_API
#endif

#endif
