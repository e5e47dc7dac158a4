// Replacing a file whole; see install_file.h.
#include "sweeps/runner/install_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "reports/results/error.h"

namespace sweep {
namespace {

// Removes the temporary file unless it was installed.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

void install_file(const std::filesystem::path& path, const std::string& text, const std::string& what,
                  const std::string& field, const std::string& hint,
                  const std::function<void(const std::string& written)>& check) {
  auto cannot_write = [&](int err) {
    throw UserError(path.string(), 0, field, "cannot write " + what + ": " + std::strerror(err), hint);
  };
  std::string name = (path.parent_path() / ("." + path.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(name.data());  // fills in the XXXXXX
  if (fd < 0) cannot_write(errno);
  TempFile tmp{name};
  // mkstemp creates the file for its owner only; ours are as readable as any other file.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      cannot_write(err);
    }
    done += static_cast<std::size_t>(n);
  }
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  if (synced || closed) cannot_write(synced ? synced : closed);
  if (check) check(tmp.path);
  std::error_code ec;
  std::filesystem::rename(tmp.path, path, ec);
  if (ec) cannot_write(ec.value());
  tmp.keep = true;
}

}  // namespace sweep
