// PiBench's tree_api over Ferrite's C ABI. The driver calls these methods from
// its worker threads; the C ABI is thread-safe, and scan results live in a
// per-thread buffer as the interface asks.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <new>
#include <vector>

#include "ferrite_pibench.h"
#include "tree_api.hpp"

namespace {

class ferrite_tree final : public tree_api {
public:
    ferrite_tree(ferrite_kv* kv, std::size_t key_size, std::size_t value_size)
        : kv_(kv), key_size_(key_size), value_size_(value_size) {}

    ~ferrite_tree() override { ferrite_kv_close(kv_); }

    bool find(const char* key, std::size_t key_sz, char* value_out) override {
        return ferrite_kv_find(kv_, key, key_sz, value_out, value_size_) == 1;
    }

    bool insert(const char* key, std::size_t key_sz, const char* value,
                std::size_t value_sz) override {
        return ferrite_kv_insert(kv_, key, key_sz, value, value_sz) == 1;
    }

    bool update(const char* key, std::size_t key_sz, const char* value,
                std::size_t value_sz) override {
        return ferrite_kv_update(kv_, key, key_sz, value, value_sz) == 1;
    }

    bool remove(const char* key, std::size_t key_sz) override {
        return ferrite_kv_remove(kv_, key, key_sz) == 1;
    }

    int scan(const char* key, std::size_t key_sz, int scan_sz, char*& values_out) override {
        static thread_local std::vector<char> buf;
        if (scan_sz <= 0) {
            values_out = buf.data();
            return 0;
        }
        std::size_t rec = key_size_ + value_size_;
        std::size_t need = rec * static_cast<std::size_t>(scan_sz);
        if (buf.size() < need) buf.resize(need);
        int n = ferrite_kv_scan(kv_, key, key_sz, scan_sz, buf.data(), buf.size(), key_size_,
                                value_size_);
        values_out = buf.data();
        return n < 0 ? 0 : n;
    }

    // PiBench calls this on every worker thread before the thread's first
    // operation of each phase (bulk load, load, verification, run). Ferrite
    // needs no per-thread setup: every ferrite_kv_* call is thread-safe, and
    // its per-thread state (scan and value buffers, allocator caches, write
    // stripe, persist counters) is created on the thread's first use. So this
    // only counts the calls, which lets the dlopen test prove that the
    // driver's last vtable slot reaches this method (ferrite_pibench_tls_setups).
    void tls_setup() override { tls_setups_.fetch_add(1, std::memory_order_relaxed); }

    std::uint64_t tls_setups() const { return tls_setups_.load(std::memory_order_relaxed); }

private:
    ferrite_kv* kv_;
    std::size_t key_size_;
    std::size_t value_size_;
    std::atomic<std::uint64_t> tls_setups_{0};
};

}  // namespace

// Called by the Rust-side `create_tree` (the exported symbol), which forwards
// the driver's tree_options_t reference as a pointer.
extern "C" tree_api* ferrite_pibench_create_tree(const tree_options_t* opt) {
    try {
        ferrite_kv* kv = ferrite_kv_open(opt->pool_path.c_str(), opt->pool_size, opt->key_size,
                                         opt->value_size, opt->num_threads);
        if (kv == nullptr) {
            std::fprintf(stderr, "ferrite: create_tree failed: %s\n", ferrite_kv_last_error());
            return nullptr;
        }
        return new ferrite_tree(kv, opt->key_size, opt->value_size);
    } catch (...) {
        std::fprintf(stderr, "ferrite: create_tree failed: out of memory\n");
        return nullptr;
    }
}

// Called by the Rust-side `ferrite_pibench_tls_setups` (exported): how often
// tls_setup ran on this tree; -1 when the tree is not one of ours.
extern "C" std::int64_t ferrite_pibench_tree_tls_setups(const tree_api* tree) {
    const auto* t = dynamic_cast<const ferrite_tree*>(tree);
    return t == nullptr ? -1 : static_cast<std::int64_t>(t->tls_setups());
}
