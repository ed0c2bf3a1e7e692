// PiBench's tree_api over Ferrite's C ABI. The driver calls these methods from
// its worker threads; the C ABI is thread-safe, and scan results live in a
// per-thread buffer as the interface asks.
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

private:
    ferrite_kv* kv_;
    std::size_t key_size_;
    std::size_t value_size_;
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
