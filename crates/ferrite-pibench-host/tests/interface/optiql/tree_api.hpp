// PiBench's include/tree_api.hpp at 11c74d694331967e58cfb555d06820f8a627a6f4
// (optiql branch, the commit scripts/pibench pins), stated in our own words:
// declarations only. The test wrappers are compiled against this file only
// when no checkout of that commit is available (PIBENCH_SRC); never against
// the host's include/pibench_layouts.hpp.
#ifndef FERRITE_TEST_OPTIQL_TREE_API_HPP
#define FERRITE_TEST_OPTIQL_TREE_API_HPP

#include <cstddef>
#include <string>

struct tree_options_t {
    size_t key_size = 8;
    size_t value_size = 8;
    std::string pool_path = "";
    size_t pool_size = 0;
    size_t num_threads = 1;
    void* data;
};

class tree_api;
extern "C" tree_api* create_tree(const tree_options_t& options);

class tree_api {
public:
    virtual ~tree_api() {}
    virtual bool bulk_load(const char*, size_t, size_t, size_t) { return false; }
    virtual bool find(const char* key, size_t key_len, char* value_out) = 0;
    virtual bool insert(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool update(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool remove(const char* key, size_t key_len) = 0;
    virtual int scan(const char* key, size_t key_len, int count, char*& records_out) = 0;
    virtual void tls_setup() {}
};

#endif
