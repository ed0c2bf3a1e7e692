// Loads libferrite_pibench.so the way PiBench does (dlopen, dlsym("create_tree"),
// virtual calls through tree_api from several threads) and either checks every
// method ("check") or runs a small PiBench-style load + run ("bench").
//
//   pibench_driver check LIB POOL_PATH
//   pibench_driver bench LIB POOL_PATH N P THREADS lookup|insert|update|scan|mixed
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tree_api.hpp"

using create_fn = tree_api* (*)(const tree_options_t&);

static int g_checks = 0;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        ++g_checks;                                                                 \
        if (!(cond)) {                                                              \
            std::fprintf(stderr, "CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                           \
        }                                                                           \
    } while (0)

// 8-byte big-endian key, so byte order is numeric order.
static void be_key(uint64_t v, char* out) {
    for (int i = 7; i >= 0; --i) {
        out[i] = static_cast<char>(v & 0xff);
        v >>= 8;
    }
}

static uint64_t from_be(const char* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

static create_fn load_library(const char* lib) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        std::fprintf(stderr, "dlopen(%s): %s\n", lib, dlerror());
        std::exit(2);
    }
    void* sym = dlsym(h, "create_tree");
    if (sym == nullptr) {
        std::fprintf(stderr, "dlsym(create_tree): %s\n", dlerror());
        std::exit(2);
    }
    return reinterpret_cast<create_fn>(sym);
}

static int check(const char* lib, const std::string& pool_path) {
    create_fn create = load_library(lib);
    tree_options_t opt;
    opt.key_size = 8;
    opt.value_size = 8;
    opt.pool_path = pool_path;
    opt.pool_size = 256ull << 20;
    opt.num_threads = 2;
    tree_api* t = create(opt);
    CHECK(t != nullptr);

    char k[8], v[8], out[8];
    be_key(0, k);  // PiBench's first key is 0: an ordinary key
    std::memcpy(v, "value-00", 8);
    CHECK(!t->find(k, 8, out));
    CHECK(t->insert(k, 8, v, 8));
    CHECK(!t->insert(k, 8, v, 8));
    CHECK(t->find(k, 8, out) && std::memcmp(out, "value-00", 8) == 0);
    std::memcpy(v, "value-01", 8);
    CHECK(t->update(k, 8, v, 8));
    CHECK(t->find(k, 8, out) && std::memcmp(out, "value-01", 8) == 0);
    be_key(1, k);
    CHECK(!t->update(k, 8, v, 8));
    CHECK(!t->remove(k, 8));
    CHECK(!t->find(k, 8, out));

    // Even keys 2..2000, value = the number.
    for (uint64_t i = 1; i <= 1000; ++i) {
        be_key(2 * i, k);
        be_key(2 * i, v);
        CHECK(t->insert(k, 8, v, 8));
    }
    // scan from an absent key lands on the next one; records are contiguous
    // <key><value> pairs in ascending order.
    char* recs = nullptr;
    be_key(101, k);
    int n = t->scan(k, 8, 10, recs);
    CHECK(n == 10 && recs != nullptr);
    for (int i = 0; i < n; ++i) {
        uint64_t key = from_be(recs + i * 16);
        CHECK(key == 102 + 2 * static_cast<uint64_t>(i));
        CHECK(from_be(recs + i * 16 + 8) == key);
    }
    be_key(0, k);
    n = t->scan(k, 8, 100, recs);
    CHECK(n == 100);
    CHECK(from_be(recs) == 0 && std::memcmp(recs + 8, "value-01", 8) == 0);
    for (int i = 1; i < n; ++i) CHECK(from_be(recs + i * 16) > from_be(recs + (i - 1) * 16));
    be_key(1999, k);
    CHECK(t->scan(k, 8, 100, recs) == 1 && from_be(recs) == 2000);
    be_key(2001, k);
    CHECK(t->scan(k, 8, 100, recs) == 0);
    be_key(1000, k);
    CHECK(t->remove(k, 8));
    CHECK(!t->remove(k, 8));
    CHECK(!t->find(k, 8, out));
    be_key(998, k);
    CHECK(t->scan(k, 8, 2, recs) == 2 && from_be(recs) == 998 && from_be(recs + 16) == 1002);

    // Two threads insert disjoint keys and read them back concurrently.
    std::atomic<int> bad{0};
    std::vector<std::thread> ws;
    for (int w = 0; w < 2; ++w) {
        ws.emplace_back([&, w] {
            char kk[8], vv[8], oo[8];
            for (uint64_t i = 0; i < 5000; ++i) {
                uint64_t key = 1000000 + 2 * i + static_cast<uint64_t>(w);
                be_key(key, kk);
                be_key(key * 3, vv);
                if (!t->insert(kk, 8, vv, 8)) bad++;
                if (!t->find(kk, 8, oo) || from_be(oo) != key * 3) bad++;
            }
        });
    }
    for (auto& th : ws) th.join();
    CHECK(bad.load() == 0);
    be_key(1000000, k);
    n = t->scan(k, 8, 100, recs);
    CHECK(n == 100);
    for (int i = 0; i < n; ++i) CHECK(from_be(recs + i * 16) == 1000000 + static_cast<uint64_t>(i));
    delete t;

    // Reopen: a persistent index keeps everything across delete + create_tree.
    const char* which = std::getenv("FERRITE_PIBENCH_INDEX");
    bool durable = !pool_path.empty() && (which == nullptr || std::string(which) == "ferrite");
    if (durable) {
        t = create(opt);
        CHECK(t != nullptr);
        be_key(0, k);
        CHECK(t->find(k, 8, out) && std::memcmp(out, "value-01", 8) == 0);
        be_key(1000, k);
        CHECK(!t->find(k, 8, out));
        for (uint64_t i = 0; i < 10000; ++i) {
            be_key(1000000 + i, k);
            CHECK(t->find(k, 8, out) && from_be(out) == (1000000 + i) * 3);
        }
        delete t;
    }

    // String keys of 16 bytes in a temporary pool.
    tree_options_t s;
    s.key_size = 16;
    s.value_size = 8;
    s.pool_size = 64ull << 20;
    t = create(s);
    CHECK(t != nullptr);
    char sk[17];
    for (int i = 0; i < 300; ++i) {
        std::snprintf(sk, sizeof sk, "user%012d", i * 7);
        be_key(static_cast<uint64_t>(i), v);
        CHECK(t->insert(sk, 16, v, 8));
    }
    std::snprintf(sk, sizeof sk, "user%012d", 700);
    n = t->scan(sk, 16, 5, recs);
    CHECK(n == 5);
    for (int i = 0; i < n; ++i) {
        char want[17];
        std::snprintf(want, sizeof want, "user%012d", 700 + 7 * i);
        CHECK(std::memcmp(recs + i * 24, want, 16) == 0);
        CHECK(from_be(recs + i * 24 + 16) == static_cast<uint64_t>(100 + i));
    }
    CHECK(t->find(sk, 16, out) && from_be(out) == 100);
    CHECK(t->remove(sk, 16) && !t->find(sk, 16, out));
    delete t;

    std::printf("pibench adapter: %d checks passed\n", g_checks);
    return 0;
}

// A PiBench-shaped measurement: load n scrambled 8-byte keys, then p operations.
static uint64_t scramble(uint64_t id) {
    uint64_t x = id * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
}

static int bench(const char* lib, const std::string& pool_path, uint64_t n, uint64_t p,
                 int threads, const std::string& mix) {
    create_fn create = load_library(lib);
    tree_options_t opt;
    opt.pool_path = pool_path;
    opt.pool_size = 0;
    opt.num_threads = static_cast<size_t>(threads);
    tree_api* t = create(opt);
    if (t == nullptr) return 1;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ws;
    for (int w = 0; w < threads; ++w) {
        ws.emplace_back([&, w] {
            char k[8], v[8];
            for (uint64_t id = static_cast<uint64_t>(w); id < n; id += static_cast<uint64_t>(threads)) {
                be_key(scramble(id), k);
                be_key(id, v);
                t->insert(k, 8, v, 8);
            }
        });
    }
    for (auto& th : ws) th.join();
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ws.clear();
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> fresh{n};
    double exp_ss = std::log(0.2) / std::log(0.8);
    t0 = std::chrono::steady_clock::now();
    for (int w = 0; w < threads; ++w) {
        ws.emplace_back([&, w] {
            std::mt19937_64 rng(1729 + static_cast<uint64_t>(w));
            std::uniform_real_distribution<double> u(0.0, 1.0);
            char k[8], v[8], out[8];
            char* recs = nullptr;
            uint64_t h = 0;
            uint64_t quota = p / static_cast<uint64_t>(threads);
            for (uint64_t i = 0; i < quota; ++i) {
                uint64_t id;
                bool mixed = mix == "mixed";
                if (mix == "insert") {
                    id = fresh.fetch_add(1, std::memory_order_relaxed);
                } else if (mixed) {
                    id = static_cast<uint64_t>(static_cast<double>(n) * std::pow(u(rng), exp_ss));
                    if (id >= n) id = n - 1;
                } else {
                    id = rng() % n;
                }
                be_key(scramble(id), k);
                be_key(id, v);
                bool ok;
                if (mix == "lookup" || (mixed && u(rng) < 0.5)) {
                    ok = t->find(k, 8, out);
                } else if (mix == "insert") {
                    ok = t->insert(k, 8, v, 8);
                } else if (mix == "update" || mixed) {
                    ok = t->update(k, 8, v, 8);
                } else {
                    ok = t->scan(k, 8, 100, recs) > 0;
                }
                h += ok ? 1 : 0;
            }
            hits += h;
        });
    }
    for (auto& th : ws) th.join();
    double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t done = (p / static_cast<uint64_t>(threads)) * static_cast<uint64_t>(threads);
    std::printf("{\"mix\":\"%s\",\"threads\":%d,\"records\":%llu,\"ops\":%llu,\"load_s\":%.3f,"
                "\"mops\":%.3f,\"hit_rate\":%.4f}\n",
                mix.c_str(), threads, static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(done), load_s,
                static_cast<double>(done) / run_s / 1e6,
                static_cast<double>(hits.load()) / static_cast<double>(done));
    delete t;
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 4 && std::string(argv[1]) == "check") return check(argv[2], argv[3]);
    if (argc >= 8 && std::string(argv[1]) == "bench")
        return bench(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10),
                     std::strtoull(argv[5], nullptr, 10), std::atoi(argv[6]), argv[7]);
    std::fprintf(stderr,
                 "usage: %s check LIB POOL_PATH\n"
                 "       %s bench LIB POOL_PATH N P THREADS lookup|insert|update|scan|mixed\n",
                 argv[0], argv[0]);
    return 64;
}
