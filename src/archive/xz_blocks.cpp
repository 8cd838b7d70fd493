#include "archive/xz_blocks.hpp"

#include <fmt/format.h>
#include <lzma.h>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace hpcbake::archive {

namespace {

constexpr std::size_t kInput = 256 << 10;
constexpr std::size_t kHeader = 12; // stream header and footer

struct BlockInfo {
  std::uint64_t offset = 0;   // from the start of the stream
  std::uint64_t total = 0;    // header + compressed data + padding + check
  std::uint64_t unpadded = 0; // header + compressed data + check
  std::uint64_t uncompressed = 0;
};

// Reads exactly n bytes at `at`; false on error or a short file.
bool pread_all(int fd, void* buf, std::size_t n, std::uint64_t at) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
    at += static_cast<std::uint64_t>(got);
  }
  return true;
}

const char* lzma_error(lzma_ret r) {
  switch (r) {
  case LZMA_MEM_ERROR:
    return "out of memory";
  case LZMA_MEMLIMIT_ERROR:
    return "memory limit reached";
  case LZMA_FORMAT_ERROR:
    return "not xz data";
  case LZMA_OPTIONS_ERROR:
    return "unsupported options";
  case LZMA_DATA_ERROR:
    return "compressed data is corrupt";
  case LZMA_BUF_ERROR:
    return "compressed data is truncated";
  case LZMA_UNSUPPORTED_CHECK:
    return "unsupported integrity check";
  default:
    return "decoder error";
  }
}

// A decoded block header: its filter chain owns options that liblzma allocated.
struct BlockHeader {
  lzma_block block{};
  std::array<lzma_filter, LZMA_FILTERS_MAX + 1> filters{};
  BlockHeader() {
    for (auto& f : filters)
      f.id = LZMA_VLI_UNKNOWN;
  }
  ~BlockHeader() {
    for (auto& f : filters) {
      if (f.id == LZMA_VLI_UNKNOWN) break;
      std::free(f.options);
      f.options = nullptr;
    }
  }
  BlockHeader(const BlockHeader&) = delete;
  BlockHeader& operator=(const BlockHeader&) = delete;

  // An error message, or empty.
  std::string read(int fd, std::uint64_t stream_begin, const BlockInfo& info, lzma_check check) {
    std::array<std::uint8_t, 1024> buf{};
    if (!pread_all(fd, buf.data(), 1, stream_begin + info.offset)) return "cannot read the block header";
    block.version = 1;
    block.check = check;
    block.filters = filters.data();
    block.header_size = lzma_block_header_size_decode(buf[0]);
    if (buf[0] == 0 || block.header_size > buf.size() || block.header_size > info.unpadded)
      return "the block header is corrupt";
    if (!pread_all(fd, buf.data() + 1, block.header_size - 1, stream_begin + info.offset + 1))
      return "cannot read the block header";
    if (const lzma_ret r = lzma_block_header_decode(&block, nullptr, buf.data()); r != LZMA_OK)
      return fmt::format("the block header is unreadable ({})", lzma_error(r));
    if (const lzma_ret r = lzma_block_compressed_size(&block, info.unpadded); r != LZMA_OK)
      return "the block's sizes disagree with the index";
    if (block.uncompressed_size != LZMA_VLI_UNKNOWN && block.uncompressed_size != info.uncompressed)
      return "the block's sizes disagree with the index";
    return {};
  }
};

struct Item {
  char* data = nullptr; // nullptr: end of a block
  std::size_t size = 0;
};

} // namespace

struct XzBlocks::Impl {
  int fd = -1;
  std::atomic<std::uint64_t>* consumed = nullptr; // compressed bytes read, for the caller's ratio
  std::uint64_t begin = 0;
  std::string label;
  lzma_check check = LZMA_CHECK_NONE;
  std::vector<BlockInfo> blocks;

  struct Worker {
    std::vector<std::vector<char>> storage;
    std::vector<char*> free;
    std::deque<Item> full;
    bool done = false;
    std::string error;
    std::thread thread;
  };

  std::mutex mu;
  std::condition_variable cv;
  bool cancelled = false;
  std::array<Worker, 2> workers;
  // The reader's side.
  std::size_t current = 0; // the block being read
  char* lent = nullptr;
  std::size_t lent_owner = 0;

  void start() {
    for (std::size_t k = 0; k < workers.size(); ++k) {
      auto& w = workers[k];
      w.storage.resize(kQueueChunks);
      for (auto& c : w.storage) {
        c.resize(kChunk);
        w.free.push_back(c.data());
      }
    }
    for (std::size_t k = 0; k < workers.size(); ++k)
      workers[k].thread = std::thread([this, k] { run(k); });
  }

  void stop() {
    {
      std::lock_guard lock(mu);
      cancelled = true;
    }
    cv.notify_all();
    for (auto& w : workers)
      if (w.thread.joinable()) w.thread.join();
  }

  void run(std::size_t k) {
    auto& w = workers[k];
    std::string error;
    // One decoder per worker, re-initialised for each block: liblzma then keeps its
    // dictionary buffer, instead of a fresh 8 MiB allocation per block that malloc's arenas
    // would hold on to.
    lzma_stream strm = LZMA_STREAM_INIT;
    struct End {
      lzma_stream* s;
      ~End() { lzma_end(s); }
    } end{&strm};
    std::vector<std::uint8_t> in(kInput);
    for (std::size_t b = k; b < blocks.size(); b += workers.size()) {
      if (auto e = decode(w, b, strm, in); !e.empty()) {
        error = fmt::format("{}: xz block {} of {} at offset {}: {}", label, b + 1, blocks.size(),
                            begin + blocks[b].offset, e);
        break;
      }
      std::lock_guard lock(mu);
      if (cancelled) break;
      w.full.push_back(Item{});
      cv.notify_all();
    }
    std::lock_guard lock(mu);
    w.error = std::move(error);
    w.done = true;
    cv.notify_all();
  }

  // Decodes block b into worker w's queue. An error message, or empty (also when cancelled).
  std::string decode(Worker& w, std::size_t b, lzma_stream& strm, std::vector<std::uint8_t>& in) {
    const BlockInfo& info = blocks[b];
    BlockHeader header;
    if (auto e = header.read(fd, begin, info, check); !e.empty()) return e;
    if (const lzma_ret r = lzma_block_decoder(&strm, &header.block); r != LZMA_OK) return lzma_error(r);
    strm.avail_in = 0;
    std::uint64_t pos = begin + info.offset + header.block.header_size;
    const std::uint64_t stop_at = begin + info.offset + info.total;
    lzma_ret r = LZMA_OK;
    while (r != LZMA_STREAM_END) {
      char* chunk = nullptr;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !w.free.empty() || cancelled; });
        if (cancelled) return {};
        chunk = w.free.back();
        w.free.pop_back();
      }
      strm.next_out = reinterpret_cast<std::uint8_t*>(chunk);
      strm.avail_out = kChunk;
      while (strm.avail_out > 0) {
        if (strm.avail_in == 0 && pos < stop_at) {
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(in.size(), stop_at - pos));
          if (!pread_all(fd, in.data(), n, pos)) {
            give_back(w, chunk);
            return "cannot read the compressed data (the file is shorter than its index says, or unreadable)";
          }
          strm.next_in = in.data();
          strm.avail_in = n;
          pos += n;
          if (consumed) consumed->fetch_add(n, std::memory_order_relaxed);
        }
        r = lzma_code(&strm, pos < stop_at ? LZMA_RUN : LZMA_FINISH);
        if (r == LZMA_STREAM_END) break;
        if (r != LZMA_OK) {
          give_back(w, chunk);
          return lzma_error(r);
        }
      }
      const std::size_t n = kChunk - strm.avail_out;
      std::lock_guard lock(mu);
      if (n > 0)
        w.full.push_back(Item{chunk, n});
      else
        w.free.push_back(chunk);
      cv.notify_all();
    }
    if (strm.total_out != info.uncompressed) return "the decoded size disagrees with the index";
    if (strm.avail_in != 0 || pos != stop_at) return "the block is followed by unexpected data";
    return {};
  }

  void give_back(Worker& w, char* chunk) {
    std::lock_guard lock(mu);
    w.free.push_back(chunk);
  }

  la_ssize_t read(struct archive* a, const void** out) {
    std::unique_lock lock(mu);
    if (lent) {
      workers[lent_owner].free.push_back(lent);
      lent = nullptr;
      cv.notify_all();
    }
    while (current < blocks.size()) {
      const std::size_t k = current % workers.size();
      auto& w = workers[k];
      cv.wait(lock, [&] { return !w.full.empty() || w.done; });
      if (w.full.empty()) {
        archive_set_error(a, EIO, "%s", w.error.empty() ? "xz decoding stopped" : w.error.c_str());
        return -1;
      }
      const Item item = w.full.front();
      w.full.pop_front();
      if (!item.data) {
        ++current;
        continue;
      }
      lent = item.data;
      lent_owner = k;
      *out = item.data;
      return static_cast<la_ssize_t>(item.size);
    }
    return 0;
  }
};

XzBlocks::XzBlocks(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

XzBlocks::~XzBlocks() {
  if (impl_) impl_->stop();
}

std::size_t XzBlocks::blocks() const {
  return impl_->blocks.size();
}

la_ssize_t XzBlocks::read(struct archive* a, void* data, const void** out) {
  return static_cast<XzBlocks*>(data)->impl_->read(a, out);
}

std::unique_ptr<XzBlocks> XzBlocks::open(int fd, std::uint64_t begin, std::uint64_t end, const std::string& label,
                                         std::string& why_not, std::atomic<std::uint64_t>* consumed) {
  const std::uint64_t size = end - begin;
  if (end < begin || size < 2 * kHeader + 8) {
    why_not = "too small";
    return nullptr;
  }
  std::array<std::uint8_t, kHeader> head{}, foot{};
  lzma_stream_flags header_flags{}, footer_flags{};
  if (!pread_all(fd, head.data(), kHeader, begin) || !pread_all(fd, foot.data(), kHeader, end - kHeader)) {
    why_not = "cannot read the stream header and footer";
    return nullptr;
  }
  if (lzma_stream_header_decode(&header_flags, head.data()) != LZMA_OK ||
      lzma_stream_footer_decode(&footer_flags, foot.data()) != LZMA_OK ||
      lzma_stream_flags_compare(&header_flags, &footer_flags) != LZMA_OK) {
    why_not = "no single stream with a footer at the end (padding, trailing data or several streams)";
    return nullptr;
  }
  if (!lzma_check_is_supported(header_flags.check)) {
    why_not = "unsupported integrity check";
    return nullptr;
  }
  const std::uint64_t index_size = footer_flags.backward_size;
  if (index_size > size - 2 * kHeader || index_size > (64u << 20)) {
    why_not = "index size out of range";
    return nullptr;
  }
  std::vector<std::uint8_t> index_bytes(static_cast<std::size_t>(index_size));
  if (!pread_all(fd, index_bytes.data(), index_bytes.size(), end - kHeader - index_size)) {
    why_not = "cannot read the index";
    return nullptr;
  }
  lzma_index* index = nullptr;
  std::uint64_t memlimit = 64u << 20;
  std::size_t in_pos = 0;
  if (lzma_index_buffer_decode(&index, &memlimit, nullptr, index_bytes.data(), &in_pos, index_bytes.size()) !=
      LZMA_OK) {
    why_not = "unreadable index";
    return nullptr;
  }
  struct IndexEnd {
    lzma_index* i;
    ~IndexEnd() { lzma_index_end(i, nullptr); }
  } index_end{index};
  if (lzma_index_stream_flags(index, &footer_flags) != LZMA_OK || lzma_index_stream_size(index) != size) {
    why_not = "the index does not describe exactly this file";
    return nullptr;
  }

  auto impl = std::make_unique<Impl>();
  impl->fd = fd;
  impl->consumed = consumed;
  impl->begin = begin;
  impl->label = label;
  impl->check = header_flags.check;
  lzma_index_iter it;
  lzma_index_iter_init(&it, index);
  while (!lzma_index_iter_next(&it, LZMA_INDEX_ITER_BLOCK))
    impl->blocks.push_back(BlockInfo{it.block.compressed_file_offset, it.block.total_size, it.block.unpadded_size,
                                     it.block.uncompressed_size});
  if (impl->blocks.size() < 2) {
    why_not = "one block";
    return nullptr;
  }
  // Every block's filters must be decodable in bounded memory; a hostile header asking for a
  // huge dictionary is left to the sequential decoder's own limit and error.
  for (const auto& b : impl->blocks) {
    BlockHeader h;
    if (auto e = h.read(fd, begin, b, impl->check); !e.empty()) {
      why_not = e;
      return nullptr;
    }
    const std::uint64_t mem = lzma_raw_decoder_memusage(h.filters.data());
    if (mem == UINT64_MAX || mem > kMaxDictionary + (1u << 20)) {
      why_not = "a block needs more than the memory allowed";
      return nullptr;
    }
  }
  impl->start();
  return std::unique_ptr<XzBlocks>(new XzBlocks(std::move(impl)));
}

} // namespace hpcbake::archive
