// Ferrite's statement of the PiBench tree_api interface, as published by
// github.com/sfu-dis/pibench at commit
//     11c74d694331967e58cfb555d06820f8a627a6f4  (include/tree_api.hpp)
// the commit scripts/pibench/run.sh pins. Written from reading that header, not
// copied: only the declarations are here, which is all a binary interface is.
//
// This is the interface the tests assert. tests/pibench_driver.cpp is compiled
// against it when no PiBench checkout is available (with one, against the
// checkout's own header instead), and tests/interface.rs checks that it says
// the same as the adapter's include/tree_api.hpp and, with a checkout, as
// PiBench's header. Change it only together with the pinned commit.
//
// Itanium C++ ABI vtable of tree_api (8-byte slots after offset-to-top and RTTI):
//   0, 1  ~tree_api (complete, deleting)
//   2     bulk_load   (default: returns false)
//   3     find
//   4     insert
//   5     update
//   6     remove
//   7     scan
//   8     tls_setup   (default: does nothing) -- the last slot
#ifndef FERRITE_STATED_PIBENCH_TREE_API_HPP
#define FERRITE_STATED_PIBENCH_TREE_API_HPP

#include <cstddef>
#include <string>

// Field order and types fix the layout (72 bytes on x86-64 with libstdc++).
struct tree_options_t {
    size_t key_size = 8;
    size_t value_size = 8;
    std::string pool_path = "";
    size_t pool_size = 0;
    size_t num_threads = 1;
    void* data;  // PiBench leaves it uninitialised unless built with EBR
};

class tree_api;
extern "C" tree_api* create_tree(const tree_options_t& options);

class tree_api {
public:
    virtual ~tree_api() {}
    virtual bool bulk_load(const char* /*records*/, size_t /*count*/, size_t /*key_len*/,
                           size_t /*value_len*/) {
        return false;
    }
    virtual bool find(const char* key, size_t key_len, char* value_out) = 0;
    virtual bool insert(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool update(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool remove(const char* key, size_t key_len) = 0;
    virtual int scan(const char* key, size_t key_len, int count, char*& records_out) = 0;
    virtual void tls_setup() {}
};

#endif
