/* How a product's tiles are shared among OpenMP threads: chunks of up to 64
 * tiles (half the tensor when smaller), but at least 64 chunks, handed out as
 * threads come free (schedule(dynamic, chunk)). A long stretch of weights per
 * chunk for the prefetchers to stream; and when another thread or process
 * preempts one thread, the others take its chunks instead of waiting for it
 * at the end. */
#ifndef INFERD_WORK_CHUNKS_H
#define INFERD_WORK_CHUNKS_H

#include <stdint.h>

static inline int64_t work_chunk(int64_t tiles) {
    int64_t chunk = tiles / 2 < 64 ? tiles / 2 : 64;
    if (tiles / 64 > chunk) chunk = tiles / 64;
    return chunk < 1 ? 1 : chunk;
}

#endif
