/* C ABI of Ferrite's ordered key-value index (libferrite_pibench.so).
 * Every function is thread-safe. Return codes: 1 yes/found, 0 no/absent,
 * -1 error (ferrite_kv_last_error() says why, on the calling thread). */
#ifndef FERRITE_PIBENCH_H
#define FERRITE_PIBENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferrite_kv ferrite_kv;

/* Opens the index named by $FERRITE_PIBENCH_INDEX (ferrite [default],
 * ferrite-dram, btreemap). For ferrite: an existing pool file at pool_path is
 * reopened (its index rebuilt), otherwise one of pool_size bytes is created
 * there (0 = 4 GiB); an empty pool_path means a temporary pool in /dev/shm,
 * removed at close. NULL on error. */
ferrite_kv* ferrite_kv_open(const char* pool_path, uint64_t pool_size, size_t key_size,
                            size_t value_size, size_t threads);
void ferrite_kv_close(ferrite_kv* kv);
/* Copies at most value_cap bytes of the value into value_out. */
int ferrite_kv_find(ferrite_kv* kv, const char* key, size_t key_len, char* value_out,
                    size_t value_cap);
int ferrite_kv_insert(ferrite_kv* kv, const char* key, size_t key_len, const char* value,
                      size_t value_len);
int ferrite_kv_update(ferrite_kv* kv, const char* key, size_t key_len, const char* value,
                      size_t value_len);
int ferrite_kv_remove(ferrite_kv* kv, const char* key, size_t key_len);
/* Writes up to n records of record_key + record_value bytes (keys and values
 * zero-padded or cut to those sizes) with key >= key into out (out_cap bytes);
 * returns how many, or -1. */
int ferrite_kv_scan(ferrite_kv* kv, const char* key, size_t key_len, int n, char* out,
                    size_t out_cap, size_t record_key, size_t record_value);
uint64_t ferrite_kv_count(ferrite_kv* kv);
/* The index's name (static string). */
const char* ferrite_kv_name(ferrite_kv* kv);
/* The last error on this thread (valid until the next call on this thread). */
const char* ferrite_kv_last_error(void);

/* PiBench adapter: how many times the driver called tls_setup (the last
 * tree_api vtable slot) on a tree that create_tree returned; -1 for NULL or a
 * tree of another library. */
int64_t ferrite_pibench_tls_setups(const void* tree);

#ifdef __cplusplus
}
#endif
#endif
