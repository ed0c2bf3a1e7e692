/*
 * The C API of Ferrite in one program.
 *
 *   cargo build --release -p ferrite-c
 *   cc -std=c11 crates/ferrite-c/examples/demo.c -I crates/ferrite-c/include \
 *      -L target/release -lferrite_c -Wl,-rpath,$PWD/target/release -o demo
 *   ./demo /dev/shm/demo.pool          the tour: write, read, iterate, batch,
 *                                      transaction, compare-and-swap, errors, Elf
 *   ./demo /dev/shm/demo.pool writer   commits transactions until killed
 *   ./demo /dev/shm/demo.pool check    after a kill -9: reopen and read back
 *   ./demo /dev/shm/demo.pool open     just open the pool (shows FERRITE_ERR_IN_USE)
 *
 * The test suite compiles and runs it (crates/ferrite-c/tests/c_example.rs).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrite.h"

#define K(s) (const uint8_t *)(s), strlen(s)

/* Prints the failure and exits. */
static void die(const char *what, int st) {
    fprintf(stderr, "%s: %s: %s\n", what, ferrite_status_name(st), ferrite_last_error());
    exit(1);
}

#define CHECK(what, call)                   \
    do {                                    \
        int st_ = (call);                   \
        if (st_ < 0) die((what), st_);      \
    } while (0)

static void put_u64(uint8_t out[8], uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) out[i] = (uint8_t)v;
}

static uint64_t get_u64(const uint8_t in[8]) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | in[i];
    return v;
}

/* ferrite_map_get_with's callback: counts the bytes without copying. */
static void count_bytes(void *ctx, const uint8_t *value, size_t len) {
    (void)value;
    *(size_t *)ctx = len;
}

static void print_range(ferrite_map *m, int reverse) {
    ferrite_iter *it;
    CHECK("range", ferrite_map_range(m, K("a"), K("d"), 0, &it));
    const uint8_t *k, *v;
    size_t kl, vl;
    printf(reverse ? "reverse:" : "range:");
    for (;;) {
        int st = reverse ? ferrite_iter_prev(it, &k, &kl, &v, &vl)
                         : ferrite_iter_next(it, &k, &kl, &v, &vl);
        if (st == FERRITE_END) break;
        if (st < 0) die("iterate", st);
        printf(" %.*s=%.*s", (int)kl, (const char *)k, (int)vl, (const char *)v);
    }
    printf("\n");
    ferrite_iter_free(it);
}

static int tour(const char *path) {
    ferrite_db *db;
    ferrite_map *m;
    CHECK("open", ferrite_db_open_or_create(path, 256u << 20, &db));
    printf("durability: %s\n", ferrite_db_durability(db));
    CHECK("map", ferrite_db_map(db, "fruit", &m));

    /* Writes: 0 = done, a positive status = "no" answers. */
    printf("insert apple: %s\n", ferrite_status_name(ferrite_map_insert(m, K("apple"), K("red"))));
    printf("insert apple again: %s\n",
           ferrite_status_name(ferrite_map_insert(m, K("apple"), K("green"))));
    CHECK("upsert", ferrite_map_upsert(m, K("banana"), K("yellow")));
    CHECK("upsert", ferrite_map_upsert(m, K("cherry"), K("dark red")));
    printf("update durian: %s\n", ferrite_status_name(ferrite_map_update(m, K("durian"), K("?"))));

    /* Reads: into a buffer, into a new buffer, or lent (zero-copy). */
    uint8_t buf[16];
    size_t len;
    CHECK("get", ferrite_map_get(m, K("cherry"), buf, sizeof buf, &len));
    printf("get cherry: %.*s\n", (int)len, (const char *)buf);
    printf("get into 2 bytes: %s (needs %zu)\n",
           ferrite_status_name(ferrite_map_get(m, K("cherry"), buf, 2, &len)), len);
    uint8_t *owned;
    CHECK("get_alloc", ferrite_map_get_alloc(m, K("banana"), &owned, &len));
    printf("get_alloc banana: %.*s\n", (int)len, (const char *)owned);
    ferrite_free(owned);
    size_t n = 0;
    CHECK("get_with", ferrite_map_get_with(m, K("apple"), count_bytes, &n));
    printf("get_with apple: %zu bytes\n", n);

    print_range(m, 0);
    print_range(m, 1);

    /* A batch: all or nothing. Balances are 8-byte big-endian numbers. */
    uint8_t v100[8], v0[8];
    put_u64(v100, 100);
    put_u64(v0, 0);
    ferrite_batch *b = ferrite_batch_new();
    CHECK("batch", ferrite_batch_put(b, K("alice"), v100, 8));
    CHECK("batch", ferrite_batch_put(b, K("bob"), v0, 8));
    CHECK("apply", ferrite_map_apply(m, b));
    ferrite_batch_free(b);

    /* A transaction: read two balances, move 30, commit both or neither. */
    ferrite_txn *t;
    uint8_t a[8], c[8];
    CHECK("begin", ferrite_map_begin(m, &t));
    CHECK("txn get", ferrite_txn_get(t, K("alice"), a, 8, &len));
    CHECK("txn get", ferrite_txn_get(t, K("bob"), c, 8, &len));
    put_u64(a, get_u64(a) - 30);
    put_u64(c, get_u64(c) + 30);
    CHECK("txn put", ferrite_txn_upsert(t, K("alice"), a, 8));
    CHECK("txn put", ferrite_txn_upsert(t, K("bob"), c, 8));
    CHECK("commit", ferrite_txn_commit(t));
    CHECK("get", ferrite_map_get(m, K("alice"), a, 8, &len));
    CHECK("get", ferrite_map_get(m, K("bob"), c, 8, &len));
    printf("after the transfer: alice=%" PRIu64 " bob=%" PRIu64 "\n", get_u64(a), get_u64(c));

    /* Compare-and-swap: NULL expected means "absent". */
    printf("cas lock (absent -> me): %s\n",
           ferrite_status_name(ferrite_map_compare_and_swap(m, K("lock"), NULL, 0, K("me"))));
    printf("cas lock (absent -> you): %s\n",
           ferrite_status_name(ferrite_map_compare_and_swap(m, K("lock"), NULL, 0, K("you"))));
    CHECK("remove", ferrite_map_remove(m, K("lock")));

    /* Errors are codes plus a message. */
    static uint8_t big[2000];
    int st = ferrite_map_insert(m, big, sizeof big, K("v"));
    printf("oversized key: %s: %s\n", ferrite_status_name(st), ferrite_last_error());
    ferrite_map *wrong;
    ferrite_elf *e;
    uint32_t ship[] = {10, 11, 10, 12}, qty[] = {5, 7, 8, 5};
    const uint32_t *cols[] = {ship, qty};
    st = ferrite_db_elf(db, "lineitem", &e);
    if (st == FERRITE_ERR_NO_SUCH_OBJECT) CHECK("create_elf", ferrite_db_create_elf(db, "lineitem", cols, 2, 4, &e));
    else if (st < 0) die("elf", st);
    st = ferrite_db_map(db, "lineitem", &wrong);
    printf("lineitem as a map: %s\n", ferrite_status_name(st));

    /* Elf: the ids of rows with shipdate 10 and quantity <= 8. */
    ferrite_elf_bound q[] = {{0, 10, 10}, {1, 0, 8}};
    uint32_t *ids;
    size_t count;
    CHECK("query", ferrite_elf_query(e, q, 2, &ids, &count));
    printf("elf: %zu of %" PRIu64 " rows match:", count, ferrite_elf_rows(e));
    for (size_t i = 0; i < count; i++) printf(" %" PRIu32, ids[i]);
    printf("\n");
    ferrite_free(ids);
    ferrite_elf_free(e);

    printf("keys: %" PRIu64 "\n", ferrite_map_len(m));
    printf("close with the map still open: %s\n", ferrite_status_name(ferrite_db_close(db)));
    ferrite_map_free(m); /* the last handle: the pool closes */
    return 0;
}

static int writer(const char *path) {
    ferrite_db *db;
    ferrite_map *m;
    CHECK("open", ferrite_db_open_or_create(path, 256u << 20, &db));
    CHECK("map", ferrite_db_map(db, "txns", &m));
    uint8_t v[8];
    size_t len;
    uint64_t i = 0;
    if (ferrite_map_get(m, K("last"), v, 8, &len) == FERRITE_OK) i = get_u64(v) + 1;
    for (;; i++) {
        ferrite_txn *t;
        char key[32];
        put_u64(v, i);
        CHECK("begin", ferrite_map_begin(m, &t));
        for (int p = 0; p < 3; p++) {
            snprintf(key, sizeof key, "txn:%08" PRIu64 ":%c", i, "abc"[p]);
            CHECK("txn put", ferrite_txn_upsert(t, K(key), v, 8));
        }
        CHECK("txn put", ferrite_txn_upsert(t, K("last"), v, 8));
        CHECK("commit", ferrite_txn_commit(t));
        printf("acked %" PRIu64 "\n", i);
        fflush(stdout);
    }
    return 0; /* not reached: the writer runs until it is killed */
}

static int check(const char *path) {
    ferrite_db *db;
    ferrite_map *m;
    CHECK("open", ferrite_db_open(path, &db));
    CHECK("map", ferrite_db_map(db, "txns", &m));
    uint8_t v[8];
    size_t len;
    if (ferrite_map_get(m, K("last"), v, 8, &len) != FERRITE_OK) die("no transaction", FERRITE_ERR_OTHER);
    uint64_t last = get_u64(v);
    char key[32];
    for (uint64_t i = 0; i <= last; i++) {
        for (int p = 0; p < 3; p++) {
            snprintf(key, sizeof key, "txn:%08" PRIu64 ":%c", i, "abc"[p]);
            if (ferrite_map_contains(m, K(key)) != FERRITE_OK) {
                printf("missing %s (last %" PRIu64 ")\n", key, last);
                return 1;
            }
        }
    }
    uint64_t after;
    snprintf(key, sizeof key, "txn:%08" PRIu64 ":", last + 1);
    CHECK("count", ferrite_map_count_range(m, K(key), K("txn:~"), 0, &after));
    printf("ok last=%" PRIu64 " keys=%" PRIu64 " after=%" PRIu64 "\n", last, ferrite_map_len(m), after);
    ferrite_map_free(m);
    CHECK("close", ferrite_db_close(db));
    return after == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s POOL [writer|check|open]\n", argv[0]);
        return 64;
    }
    if (argc == 2) return tour(argv[1]);
    if (strcmp(argv[2], "writer") == 0) return writer(argv[1]);
    if (strcmp(argv[2], "check") == 0) return check(argv[1]);
    if (strcmp(argv[2], "open") == 0) {
        ferrite_db *db;
        int st = ferrite_db_open(argv[1], &db);
        printf("open: %s\n", ferrite_status_name(st));
        if (st < 0) {
            printf("message: %s\n", ferrite_last_error());
            return 2;
        }
        return ferrite_db_close(db) == FERRITE_OK ? 0 : 1;
    }
    fprintf(stderr, "unknown mode %s\n", argv[2]);
    return 64;
}
