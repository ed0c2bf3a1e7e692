// PiBench master's include/tree_api.hpp (the layout the VLDB'22 artifact's
// wrappers are built against), stated in our own words: declarations only.
// The test wrappers are compiled against this file only when no PiBench master
// checkout is available (PIBENCH_MASTER_SRC); never against the host's
// include/pibench_layouts.hpp.
#ifndef FERRITE_TEST_EP2_TREE_API_HPP
#define FERRITE_TEST_EP2_TREE_API_HPP

#include <cstddef>
#include <string>

struct tree_options_t {
    size_t key_size = 8;
    size_t value_size = 8;
    std::string pool_path = "";
    size_t pool_size = 0;
    size_t num_threads = 1;
};

class tree_api;
extern "C" tree_api* create_tree(const tree_options_t& opt);

class tree_api {
public:
    virtual ~tree_api() {}
    virtual bool find(const char* key, size_t sz, char* value_out) = 0;
    virtual bool insert(const char* key, size_t key_sz, const char* value, size_t value_sz) = 0;
    virtual bool update(const char* key, size_t key_sz, const char* value, size_t value_sz) = 0;
    virtual bool remove(const char* key, size_t key_sz) = 0;
    virtual int scan(const char* key, size_t key_sz, int scan_sz, char*& values_out) = 0;
};

#endif
